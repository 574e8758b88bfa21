"""Input samples for the workflow benchmarks: generated once per (workflow, events, seed) and reused."""

from __future__ import annotations

import importlib
import os
from pathlib import Path


def generated_input(out: Path, workflow: str, events: int, seed: int) -> str:
    """``<out>/<workflow>_input_<events>_<seed>.root``, generated with ``sonic data generate <workflow>``'s
    ``generate(path, events, seed=...)`` unless it is already there (reruns then time the same events)."""
    path = str(out / f"{workflow}_input_{events}_{seed}.root")
    if not os.path.exists(path):
        generate = importlib.import_module(f"sonic_hep.data.{workflow}.generate").generate
        generate(path, events, seed=seed)
    return path
