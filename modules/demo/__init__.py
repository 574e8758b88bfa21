"""Toy modules that exercise inference without any physics input (``configs/demo_inference.yaml``)."""
