"""Benchmarks run by ``sonic bench NAME``: one module per benchmark, each writing its results to ``--out``."""
