"""The model side: kokoro checkpoints and the exportable wrappers over kokoro's modules (torch)."""
