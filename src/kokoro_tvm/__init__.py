"""kokoro-tvm-pipeline: compile Kokoro-82M into cached, per-bucket TVM libraries."""

__version__ = "0.1.0"
