"""DVC stages, one module per stage kind, each run as ``python -m kokoro_tvm.pipeline.<kind> ARGS``
(``entry`` parses the arguments and calls the module's ``run``)."""
