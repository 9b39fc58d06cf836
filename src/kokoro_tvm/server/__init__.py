"""``kokoro-tvm serve``: OpenAI's speech API over HTTP, every stream kept ahead of playback.

``options`` (the command), ``engine`` (the model, voices and threads of one process),
``scheduler`` (chunks of all streams, earliest deadline first, and admission control), ``app``
(the HTTP endpoints), ``schema`` and ``voices`` (requests as OpenAI clients send them),
``encoders`` (one streaming encoder per response), ``metrics`` (Prometheus) and ``page`` (the
web page). Needs the ``serve`` extra (FastAPI, uvicorn, PyAV); the runtime does not.
"""
