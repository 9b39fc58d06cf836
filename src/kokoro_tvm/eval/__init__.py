"""Evaluation: eager kokoro ground truth, parity metrics, validation and benchmarks."""
