"""Small NanoAOD-like input files and configurations for grid tests, and the output comparison."""

from __future__ import annotations

from pathlib import Path

import awkward as ak
import numpy as np
import uproot
import yaml


def write_nano(path: Path, n: int, seed: int, first_event: int = 1) -> Path:
    """Writes ``n`` random events NanoAOD-style: run/luminosityBlock/event, nJet + Jet_{pt,eta,phi,mass}, MET_pt."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(4, n)
    total = int(counts.sum())
    columns = {
        "run": np.ones(n, np.int64), "luminosityBlock": np.arange(n, dtype=np.int64) // 50 + 1,
        "event": np.arange(first_event, first_event + n, dtype=np.int64),
        "Jet": ak.zip({name: ak.unflatten(values.astype(np.float32), counts) for name, values in {
            "pt": rng.exponential(40, total) + 10, "eta": rng.uniform(-4, 4, total),
            "phi": rng.uniform(-np.pi, np.pi, total), "mass": rng.uniform(0, 20, total)}.items()}),
        "MET_pt": rng.exponential(30, n).astype(np.float32),
    }
    with uproot.recreate(path) as handle:
        tree = handle.mktree("Events", {k: v.type.content if isinstance(v, ak.Array) else v.dtype
                                        for k, v in columns.items()},
                             field_name=lambda outer, inner: f"{outer}_{inner}", counter_name=lambda c: f"n{c}")
        tree.extend(columns)
    return path


def analysis_config(path: Path, busy_ms: float = 0.0, histogram: bool = False, gate: Path | None = None,
                    **source: object) -> Path:
    """A selection workflow: HT, a two-jet filter, selected jets; optionally a CPU burner, a histogram, and a
    gate that holds every event until the file ``gate`` exists (so tests kill jobs at a known point)."""
    modules: dict[str, dict] = {"ht": {"type": "CollectionSum", "min_pt": 30.0},
                                "twojets": {"type": "MinCountFilter", "min_count": 2},
                                "good": {"type": "SelectObjects", "min_pt": 25.0}}
    if busy_ms:  # slows the job down; the histogram keeps it from being pruned (only the tree is compared)
        modules["busy"] = {"type": "BusyProducer", "ms": busy_ms}
        modules["busyhist"] = {"type": "Histogram1D", "src": "busy:value", "name": "index", "high": 1000.0}
    if gate is not None:  # held events; the histogram keeps the gate from being pruned
        modules["gate"] = {"type": "WaitForFile", "path": str(gate)}
        modules["gatehist"] = {"type": "Histogram1D", "src": "gate:value", "name": "gate", "high": 1000.0}
    if histogram:
        modules["hht"] = {"type": "Histogram1D", "src": "ht:sum", "bins": 20, "low": 0.0, "high": 1000.0}
    config = {"process": "gridtest", "source": {"chunk_size": 40, **source}, "modules": modules,
              "output": {"products": ["ht:*", "good:objects as GoodJet", "MET_pt"]}}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def assert_same_events(merged: Path, single: Path, tree: str = "Events") -> int:
    """Every branch of ``single`` equals the same branch of ``merged``, entry by entry; returns the entries."""
    with uproot.open(merged) as a, uproot.open(single) as b:
        ta, tb = a[tree], b[tree]
        assert sorted(ta.keys()) == sorted(tb.keys())
        assert ta.num_entries == tb.num_entries > 0
        for name in tb.keys():
            assert ak.all(ta[name].array() == tb[name].array()), name
        return int(tb.num_entries)
