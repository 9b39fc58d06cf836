"""``kokoro-tvm serve``: OpenAI's speech API over HTTP, every stream kept ahead of playback.

``options`` (the command), ``main`` (uvicorn), ``engine`` (the model, voices and threads of one
process), ``scheduler`` (chunks of all streams, earliest deadline first) with ``streams`` (a
stream's state), ``cost_model`` (what a chunk costs) and ``admission`` (whether one more stream
fits), ``app`` (the HTTP app) with its routes (``routes_info``, ``routes_speech``,
``fastapi_compat``), ``intake`` (a speech request read, admitted and prepared), ``streaming``
(its response), ``middleware``, ``connections`` and ``errors``; ``schema`` and ``voices``
(requests as OpenAI clients send them), ``encoders`` (one streaming encoder per response),
``metrics`` and ``families`` (Prometheus) and ``page`` (the web page). Needs the ``serve``
extra (FastAPI, uvicorn, PyAV); the runtime does not.
"""
