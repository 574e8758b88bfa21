"""Modules of the sonic-hep workflows (one package per workflow); registered by class name."""
