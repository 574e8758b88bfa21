"""Framework overhead: scheduler cost per module call, and ROOT I/O through the framework vs raw uproot.

Two measurements, side by side in one run:

1. **Scheduler**: chains of do-nothing modules (``NullProducer``) over an empty source; the cost of one
   module call is the slope of wall time against the number of modules (so event creation and output
   are not counted), for several streams/threads settings. Goal: ≤ 30 µs per module call.
2. **I/O**: the same NanoAOD-like file (jagged collections and scalars) read and written back with raw
   uproot (``tree.arrays`` → ``mktree``/``extend`` chunk by chunk) and through the framework (source →
   events → output of the same branches). Goal: framework ≤ 1.25× raw uproot.

Results go to ``--out``: ``framework.md`` (Markdown tables), ``framework.json`` and ``framework.png``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import awkward as ak
import numpy as np
import uproot

from ...framework import Process
from ...framework import config as cfgmod
from ...framework.tree_writer import TreeWriter, compression
from ._machine import machine_description


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=20000, help="events for the scheduler measurement")
    parser.add_argument("--modules", type=int, nargs="+", default=[1, 5, 20], help="chain lengths to fit")
    parser.add_argument("--io-events", type=int, default=20000, help="events in the I/O files")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions (the median is reported)")


def scheduler_run(events: int, modules: int, streams: int, threads: int) -> float:
    chain = {"m0": {"type": "NullProducer"}}
    for k in range(1, modules):
        chain[f"m{k}"] = {"type": "NullProducer", "src": f"m{k - 1}:value"}
    cfg = cfgmod.parse({"source": {"type": "empty", "events": events, "chunk_size": 1000}, "modules": chain,
                        "options": {"streams": streams, "threads": threads, "progress": False}})
    result = Process(cfg).run(progress=False)
    return result.timing.elapsed


def scheduler_benchmark(events: int, chains: list[int], repeat: int) -> list[dict[str, Any]]:
    rows = []
    for streams, threads in ((1, 1), (4, 1), (4, 2), (8, 2)):
        times = {k: statistics.median(scheduler_run(events, k, streams, threads) for _ in range(repeat)) for k in chains}
        slope, intercept = np.polyfit(chains, [times[k] for k in chains], 1)
        rows.append({"streams": streams, "threads": threads, "events": events,
                     "us_per_module_call": 1e6 * slope / events, "us_per_event_fixed": 1e6 * intercept / events,
                     "seconds": {str(k): times[k] for k in chains}})
    return rows


#: NanoAOD-like collections: (name, mean multiplicity, number of float fields); "full" is close to the
#: branch count of a real CMS NanoAOD (~950 branches there, ~300 here), "slim" to a skimmed analysis ntuple.
LAYOUTS = {
    "full": [("Jet", 6, 30), ("FatJet", 1, 25), ("Muon", 1, 40), ("Electron", 1, 40), ("Tau", 1, 30),
             ("Photon", 1, 25), ("SV", 2, 12), ("GenPart", 40, 10), ("GenJet", 6, 6), ("TrigObj", 8, 10)],
    "slim": [("Jet", 6, 7), ("Muon", 1, 6), ("Electron", 1, 6)],
}


def write_io_file(path: Path, n: int, layout: str = "full", seed: int = 7) -> list[str]:
    """A NanoAOD-like file with jagged collections, MET scalars and event identity; returns its keys."""
    rng = np.random.default_rng(seed)
    columns: dict[str, Any] = {"run": np.ones(n, np.int64), "luminosityBlock": np.arange(n, dtype=np.int64) // 500,
                               "event": np.arange(n, dtype=np.int64)}
    for name, mean, n_fields in LAYOUTS[layout]:
        counts = rng.poisson(mean, n)
        total = int(counts.sum())
        columns[name] = ak.zip({f"f{k}": ak.unflatten(rng.normal(size=total).astype(np.float32), counts)
                                for k in range(n_fields)})
    for field in ("MET_pt", "MET_phi", "PuppiMET_pt", "PuppiMET_phi"):
        columns[field] = rng.normal(size=n).astype(np.float32)
    with TreeWriter(path, expected_extends=-(-n // 10000)) as writer:
        for start in range(0, n, 10000):
            writer.extend({k: v[start:start + 10000] for k, v in columns.items()})
    return [name for name, _, _ in LAYOUTS[layout]] + ["MET_pt", "MET_phi", "PuppiMET_pt", "PuppiMET_phi"]


def raw_uproot(src: Path, dst: Path, keys: list[str], chunk: int) -> float:
    """Read + write of the same collections with uproot alone (the baseline)."""
    start = time.perf_counter()
    with uproot.open(src, handler=uproot.source.file.MemmapSource) as fin, \
            uproot.recreate(dst, compression=compression("zstd:4")) as fout:
        tree = fin["Events"]
        names = [b for b in tree.keys() if b.split("_")[0] in keys or b in keys or b in ("run", "luminosityBlock", "event")]
        out = None
        for arrays in tree.iterate(filter_name=names, step_size=chunk, library="ak", how=dict):
            branches: dict[str, Any] = {k: arrays[k] for k in ("run", "luminosityBlock", "event")}
            for key in keys:
                if key in arrays:
                    branches[key] = arrays[key]
                else:
                    fields = {b[len(key) + 1:]: arrays[b] for b in arrays if b.startswith(key + "_")}
                    branches[key] = ak.zip(fields)
            if out is None:
                out = fout.mktree("Events", {k: (v.type.content if v.ndim > 1 or isinstance(v.type.content, ak.types.RecordType)
                                                  else ak.to_numpy(v).dtype) for k, v in branches.items()},
                                  field_name=lambda o, i: f"{o}_{i}", counter_name=lambda c: f"n{c}")
            out.extend(branches)
    return time.perf_counter() - start


def framework_io(src: Path, dst: Path, keys: list[str], chunk: int) -> float:
    """Read + write through the framework: a copy job (its one module is pruned, as nothing consumes it)."""
    logging.getLogger("sonic_hep.framework.graph").setLevel(logging.ERROR)
    cfg = cfgmod.parse({"source": {"files": [str(src)], "chunk_size": chunk},
                        "modules": {"null": {"type": "NullProducer"}},
                        "output": {"file": str(dst), "products": keys, "chunk_size": chunk, "compression": "zstd:4"},
                        "options": {"streams": 4, "threads": 1, "progress": False}})
    start = time.perf_counter()
    Process(cfg).run(progress=False)
    return time.perf_counter() - start


def io_benchmark(n: int, repeat: int, workdir: Path, layout: str) -> dict[str, Any]:
    src = workdir / f"nano_{layout}.root"
    keys = write_io_file(src, n, layout)
    chunk = 5000
    framework_io(src, workdir / "warmup.root", keys, chunk)  # imports and plug-in discovery are not I/O
    raw = [raw_uproot(src, workdir / "raw.root", keys, chunk) for _ in range(repeat)]
    fw = [framework_io(src, workdir / "fw.root", keys, chunk) for _ in range(repeat)]
    with uproot.open(workdir / "raw.root") as a, uproot.open(workdir / "fw.root") as b:
        for name in ("Jet_f0", "Muon_f1", "MET_pt", "event"):
            if not ak.all(a["Events"][name].array() == b["Events"][name].array()):
                raise AssertionError(f"framework output differs from raw uproot in {name}")
    return {"layout": layout, "events": n, "branches": len(uproot.open(src)["Events"].keys()), "chunk": chunk,
            "raw_uproot_s": statistics.median(raw), "framework_s": statistics.median(fw),
            "ratio": statistics.median(fw) / statistics.median(raw),
            "raw_us_per_event": 1e6 * statistics.median(raw) / n, "framework_us_per_event": 1e6 * statistics.median(fw) / n}


def markdown(sched: list[dict[str, Any]], io: list[dict[str, Any]], machine: str) -> str:
    lines = [f"# sonic bench framework\n\nMachine: {machine}\n", "## Scheduler cost per module call (NullProducer chains)\n",
             "| streams | threads | µs per module call | µs per event (fixed) |", "|---:|---:|---:|---:|"]
    for row in sched:
        lines.append(f"| {row['streams']} | {row['threads']} | {row['us_per_module_call']:.1f} | {row['us_per_event_fixed']:.1f} |")
    lines += ["", "Goal: ≤ 30 µs per module call.", "", "## Read + write: framework vs raw uproot (same file, same branches)\n",
              "| layout | events | branches | raw uproot (s) | framework (s) | ratio |", "|---|---:|---:|---:|---:|---:|"]
    for row in io:
        lines.append(f"| {row['layout']} | {row['events']} | {row['branches']} | {row['raw_uproot_s']:.2f} | "
                     f"{row['framework_s']:.2f} | {row['ratio']:.2f} |")
    lines += ["", "Goal: ratio ≤ 1.25 (NanoAOD-like `full` layout; `slim` shows the fixed per-event cost).", ""]
    return "\n".join(lines)


def plot(sched: list[dict[str, Any]], io: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    labels = [f"S{r['streams']}/T{r['threads']}" for r in sched]
    a.bar(labels, [r["us_per_module_call"] for r in sched], color="#4c72b0")
    a.axhline(30, color="red", linestyle="--", label="goal 30 µs")
    a.set_ylabel("µs per module call")
    a.set_title("scheduler overhead")
    a.legend()
    x = np.arange(len(io))
    b.bar(x - 0.2, [r["raw_us_per_event"] for r in io], 0.4, label="raw uproot", color="#55a868")
    b.bar(x + 0.2, [r["framework_us_per_event"] for r in io], 0.4, label="framework", color="#c44e52")
    b.set_xticks(x, [f"{r['layout']} ({r['branches']} br)\nratio {r['ratio']:.2f}" for r in io])
    b.set_ylabel("µs per event (read + write)")
    b.set_title("I/O (goal: ratio ≤ 1.25)")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = machine_description()
    sched = scheduler_benchmark(args.events, args.modules, args.repeat)
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        io = [io_benchmark(args.io_events, args.repeat, Path(tmp), layout) for layout in ("full", "slim")]
    results = {"machine": machine, "python": platform.python_version(), "scheduler": sched, "io": io}
    (out / "framework.json").write_text(json.dumps(results, indent=2))
    text = markdown(sched, io, machine)
    (out / "framework.md").write_text(text)
    plot(sched, io, out / "framework.png")
    print(text)
    print(f"results in {os.path.abspath(out)}/framework.{{md,json,png}}")
    return 0
