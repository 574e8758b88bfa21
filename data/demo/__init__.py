"""Tiny ONNX models for demonstrations, tests and benchmarks of the inference layer (no training needed)."""
