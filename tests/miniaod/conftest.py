"""Generated MiniAOD-like samples shared by the MiniAOD tests (made once per session, in tmp dirs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import uproot

from sonic_hep.data.miniaod.generate import generate
from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.process import Process

#: held-out seeds: the committed models were trained on seeds 101-106
SMALL_SEED, PHYSICS_SEED = 7, 2024


@pytest.fixture(scope="session")
def small_file(tmp_path_factory) -> Path:
    """A few events of every kind of object (jets, boosted jets, τs, leptons), for end-to-end checks."""
    path = tmp_path_factory.mktemp("miniaod-small") / "small.root"
    return generate(path, 24, seed=SMALL_SEED, process="ttbar,ztautau,wjets")


@pytest.fixture(scope="session")
def physics_files(tmp_path_factory) -> list[Path]:
    """Held-out events for the physics checks: b jets and MET (ttbar, W+jets), light jets (QCD), and a
    Z→ττ file for enough genuine τs."""
    folder = tmp_path_factory.mktemp("miniaod-physics")
    return [generate(folder / "mix.root", 240, seed=PHYSICS_SEED, process="ttbar,wjets,qcd"),
            generate(folder / "ztautau.root", 200, seed=PHYSICS_SEED + 1, process="ztautau")]


def run_config(name: str, inputs: Path | list[Path], output_path: Path, *overrides: str):
    """Runs a shipped configuration on files (no progress bar); returns the RunResult."""
    files = ", ".join(f"'{p}'" for p in (inputs if isinstance(inputs, list) else [inputs]))
    config = cfgmod.load(name, [f"source.files=[{files}]", f"output.file='{output_path}'", "options.progress=false",
                                *overrides])
    return Process(config).run(progress=False)


@pytest.fixture(scope="session")
def physics_output(physics_files, tmp_path_factory) -> Path:
    """configs/miniaod.yaml run (direct) over the physics samples."""
    path = tmp_path_factory.mktemp("miniaod-physics-out") / "out.root"
    run_config("miniaod", physics_files, path)
    return path


def branches(paths: Path | list[Path], names: list[str] | None = None) -> dict[str, np.ndarray]:
    """Branches of the Events trees of files (concatenated in order); jagged ones flattened — events are
    in the same order in the inputs and in an output, so their objects line up."""
    parts = [uproot.open(p)["Events"].arrays(names, library="np") for p in (paths if isinstance(paths, list) else [paths])]
    out = {}
    for name in parts[0]:
        values = [v for part in parts for v in ([part[name]] if part[name].dtype != object else list(part[name]))]
        out[name] = np.concatenate(values) if values else np.zeros(0)
    return out
