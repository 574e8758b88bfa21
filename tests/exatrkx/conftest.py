"""A small held-out ACTS sample and the workflow run on it, shared by the Exa.TrkX tests (made once per session).

The models were trained on seeds 11 (training) and 12 (validation); the tests simulate seed 5, so
the physics thresholds are checked on events the models have never seen.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sonic_hep.framework import Process
from sonic_hep.framework import config as cfgmod

PROJECT = Path(__file__).resolve().parents[2]
REPOSITORY = PROJECT / "data" / "models" / "exatrkx"
EVENT_SEED = 5
EVENTS = 8


@pytest.fixture(scope="session")
def events_file(tmp_path_factory) -> Path:
    pytest.importorskip("acts", reason="the ACTS simulation needs pyacts (the generators extra)")
    from sonic_hep.data.exatrkx.generate import generate

    return Path(generate(tmp_path_factory.mktemp("exatrkx") / "events.root", EVENTS, seed=EVENT_SEED))


def run_workflow(events: Path, output: Path, *overrides: str):
    """Runs configs/exatrkx.yaml on ``events``; returns the RunResult."""
    config = cfgmod.load("exatrkx", [f"source.files=['{events}']", f"output.file='{output}'",
                                     "options.progress=false", *overrides])
    return Process(config).run(progress=False)


@pytest.fixture(scope="session")
def direct_run(events_file, tmp_path_factory):
    """The per-stage pipeline with direct inference (the reference the SONIC runs must equal)."""
    return run_workflow(events_file, tmp_path_factory.mktemp("exatrkx-direct") / "direct.root")
