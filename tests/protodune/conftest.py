"""Small generated ProtoDUNE events shared by the workflow tests (made once per session, never committed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sonic_hep.data.protodune.generate import generate
from sonic_hep.data.protodune.simulate import Simulation

PROJECT = Path(__file__).resolve().parents[2]
CPU_REPOSITORY = PROJECT / "data" / "models" / "protodune"
GPU_REPOSITORY = PROJECT / "data" / "models" / "protodune_gpu"

#: random streams: training used 11 (and 12 for its own held-out check); tests use others
EVENT_SEED, HELDOUT_SEED = 5, 31


@pytest.fixture(scope="session")
def small_simulation() -> Simulation:
    return Simulation.preset("small")


@pytest.fixture(scope="session")
def small_file(tmp_path_factory) -> Path:
    """Two small-scale events (one 1 m³ TPC, a few thousand hits each) as a ROOT file."""
    path = tmp_path_factory.mktemp("protodune") / "small.root"
    return Path(generate(path, 2, "small", seed=EVENT_SEED))
