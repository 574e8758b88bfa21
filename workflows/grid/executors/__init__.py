"""Executors: one interface (``submit``, ``poll``) over a local process pool, Slurm, HTCondor and Dask."""

from .base import Executor, executor_class, names, option_help, parse_key_values

__all__ = ["Executor", "executor_class", "names", "option_help", "parse_key_values"]
