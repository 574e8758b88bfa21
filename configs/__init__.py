"""Shipped process configurations (YAML)."""
