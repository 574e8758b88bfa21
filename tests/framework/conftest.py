"""Small NanoAOD-like ROOT files written with uproot, and a helper to write configs."""

from __future__ import annotations

from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import uproot
import yaml


def make_events(n: int, seed: int, first_event: int = 1) -> dict:
    """Random NanoAOD-style columns: a jagged Jet collection, MET and event identity."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(4, n)
    total = int(counts.sum())
    jets = ak.zip({
        "pt": ak.unflatten(rng.exponential(40, total).astype(np.float32) + 10, counts),
        "eta": ak.unflatten(rng.uniform(-4, 4, total).astype(np.float32), counts),
        "phi": ak.unflatten(rng.uniform(-np.pi, np.pi, total).astype(np.float32), counts),
        "mass": ak.unflatten(rng.uniform(0, 20, total).astype(np.float32), counts),
    })
    return {"run": np.full(n, 1, np.int64), "luminosityBlock": np.arange(n, dtype=np.int64) // 100 + 1,
            "event": np.arange(first_event, first_event + n, dtype=np.int64), "Jet": jets,
            "MET_pt": rng.exponential(30, n).astype(np.float32)}


def write_nano(path: Path, n: int, seed: int, first_event: int = 1) -> Path:
    """Writes ``n`` events NanoAOD-style (nJet + Jet_<field>)."""
    columns = make_events(n, seed, first_event)
    with uproot.recreate(path) as f:
        tree = f.mktree("Events", {k: (v.type.content if isinstance(v, ak.Array) else v.dtype) for k, v in columns.items()},
                        field_name=lambda o, i: f"{o}_{i}", counter_name=lambda c: f"n{c}")
        tree.extend(columns)
    return path


@pytest.fixture(scope="session")
def nano_files(tmp_path_factory) -> list[Path]:
    """Two input files of 150 and 90 events."""
    base = tmp_path_factory.mktemp("nano")
    return [write_nano(base / "a.root", 150, seed=1), write_nano(base / "b.root", 90, seed=2, first_event=1000)]


@pytest.fixture
def write_config(tmp_path):
    """Writes a config dict as YAML in tmp_path; returns its path."""

    def write(data: dict, name: str = "config.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write
