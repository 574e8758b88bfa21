"""Framework overhead: scheduler cost per module call, and ROOT I/O through the framework vs raw uproot.

Two measurements, side by side in one run:

1. **Scheduler**: chains of do-nothing modules (``NullProducer``) over an empty source; the cost of one
   module call is the slope of wall time against the number of modules (so event creation and output
   are not counted), for several streams/threads settings. Goal: ≤ 30 µs per module call.
2. **Columnar calls**: the same chains of their columnar twins (``ColumnarNullProducer``: one call per
   batch of events) at ``options.events_per_call`` 1, 10, 100, 1000. Python's cost is per call, so what
   a batch buys is the per-call overhead spread over its events: per value, the slope against the number
   of modules gives the framework's time per module call and per event per module, and a fit of the time
   per call, ``a + b·events``, separates the fixed cost of a call (``a``) from what each event of it
   costs (``b``). Goals at 1,000 events per call: ≤ 30 µs per call, ≤ 1 µs per event per module. Each value
   runs ``--columnar-calls`` calls per module (so 1,000 events per call read 1,000 times more events than
   one: the slope of a cheap call needs many calls to rise above the noise).
3. **The tutorial's module**: ``DijetMass`` (docs/modules.md) in a job over generated jets, at 1 and at 1,000
   events per call: its own time per event from the job's report (its calls and the framework's cost of
   them). Goal: ≤ 20 µs per event at 1,000 events per call.
4. **I/O**: the same NanoAOD-like file (jagged collections and scalars) read and written back with raw
   uproot (``tree.arrays`` → ``mktree``/``extend`` chunk by chunk) and through the framework (source →
   events → output of the same branches). Goal: framework ≤ 1.25× raw uproot.

Results go to ``--out`` (by default a git-ignored folder, never the package): ``framework.md`` (Markdown
tables, with the command, machine and date), ``framework.json`` and ``framework.png``.
"""

from __future__ import annotations

import argparse
import logging
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
from ._machine import describe_load, load_average
from ._report import BenchReport, header


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=20000, help="events for the scheduler measurement")
    parser.add_argument("--modules", type=int, nargs="+", default=[1, 5, 20], help="chain lengths to fit")
    parser.add_argument("--dijet-events", type=int, default=20000,
                        help="events of the tutorial's DijetMass job (0: not measured)")
    parser.add_argument("--io-events", type=int, default=20000, help="events in the I/O files (0: no I/O comparison)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions (the median is reported)")
    parser.add_argument("--events-per-call", type=int, nargs="+", default=[1, 10, 100, 1000], metavar="N",
                        help="options.events_per_call values of the columnar measurement")
    parser.add_argument("--columnar-calls", type=int, default=2000,
                        help="calls per module at each events-per-call value (events = calls × value)")


def chain_config(events: int, modules: int, streams: int, threads: int, module_type: str = "NullProducer",
                 events_per_call: int | None = None) -> Any:
    """A chain of ``modules`` do-nothing modules over an empty source: each reads the one before, so none
    is pruned and every one is called."""
    chain: dict[str, Any] = {"m0": {"type": module_type}}
    for k in range(1, modules):
        chain[f"m{k}"] = {"type": module_type, "src": f"m{k - 1}:value"}
    options: dict[str, Any] = {"streams": streams, "threads": threads, "progress": False}
    if events_per_call is not None:
        options["events_per_call"] = events_per_call
    chunk = max(1000, events_per_call or 0)  # a batch never spans two chunks
    return cfgmod.parse({"source": {"type": "empty", "events": events, "chunk_size": chunk}, "modules": chain,
                         "options": options})


def scheduler_run(events: int, modules: int, streams: int, threads: int) -> float:
    result = Process(chain_config(events, modules, streams, threads)).run(progress=False)
    return result.timing.elapsed


def scheduler_benchmark(events: int, chains: list[int], repeat: int) -> list[dict[str, Any]]:
    rows = []
    for streams, threads in ((1, 1), (4, 1), (4, 2), (8, 2)):
        times = {k: statistics.median(scheduler_run(events, k, streams, threads) for _ in range(repeat)) for k in chains}
        slope, intercept = np.polyfit(chains, [times[k] for k in chains], 1)
        # per-event modules too are handed batches: the scheduler's choice, said beside the figure
        batch = Process(chain_config(events, chains[0], streams, threads)).events_per_call
        rows.append({"streams": streams, "threads": threads, "events": events, "events_per_call": batch,
                     "us_per_module_call": 1e6 * slope / events, "us_per_event_fixed": 1e6 * intercept / events,
                     "seconds": {str(k): times[k] for k in chains}})
    return rows


def columnar_run(events: int, modules: int, events_per_call: int) -> dict[str, Any]:
    """One chain of ``ColumnarNullProducer`` at ``events_per_call``: its wall time and what the timing
    report says the scheduler did (the batch size used, each module's calls), so a row is only believed
    when the framework really made the calls the row divides by."""
    config = chain_config(events, modules, 1, 1, "ColumnarNullProducer", events_per_call)
    report = Process(config).run(progress=False).timing.report()
    return {"seconds": report["wall_s"], "events": report["events"], "events_per_call": report["events_per_call"],
            "invocations": [m["invocations"] for m in report["modules"]]}


def fit_per_call(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """``a + b·events`` through the time per module call of each events-per-call value, in µs. Weighted by
    1/time, so every value counts by its relative error: unweighted, the largest batches (hundreds of µs a
    call) would decide ``a`` alone, which the small ones measure best."""
    x = np.array([r["events_per_call"] for r in rows], float)
    y = np.array([r["us_per_call"] for r in rows], float)
    if len(rows) < 2:
        return float(y[0]) if len(y) else 0.0, 0.0
    weights = 1.0 / np.maximum(np.abs(y), 1e-3)
    b, a = np.polyfit(x, y, 1, w=weights)
    return float(a), float(b)


def columnar_benchmark(values: list[int], chains: list[int], calls: int, repeat: int) -> dict[str, Any]:
    """Per events-per-call value: the slope of wall time against the chain's length (so the source, the
    batches' creation and the end of job are not counted), per module call and per event per module."""
    rows = []
    for value in values:
        events = calls * value
        runs = {k: [columnar_run(events, k, value) for _ in range(repeat)] for k in chains}
        times = {k: statistics.median(r["seconds"] for r in runs[k]) for k in chains}
        slope, intercept = np.polyfit(chains, [times[k] for k in chains], 1) if len(chains) > 1 else (times[chains[0]], 0.0)
        last = runs[chains[-1]][0]
        rows.append({"events_per_call": last["events_per_call"], "requested": value, "events": events,
                     "calls_per_module": max(last["invocations"]), "us_per_call": 1e6 * slope * value / events,
                     "us_per_event_per_module": 1e6 * slope / events, "us_per_event_fixed": 1e6 * intercept / events,
                     "seconds": {str(k): times[k] for k in chains}})
    a, b = fit_per_call(rows)
    at = next((r for r in rows if r["events_per_call"] == 1000), None)
    goals = {"us_per_call_max": 30.0, "us_per_event_per_module_max": 1.0}
    if at is not None:
        goals.update(us_per_call_fit=a, us_per_event_per_module_at_1000=at["us_per_event_per_module"],
                     met=bool(a <= 30.0 and at["us_per_event_per_module"] <= 1.0))
    return {"rows": rows, "fit": {"us_per_call": a, "us_per_event": b}, "chains": chains, "goals": goals}


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


def write_jets_file(path: Path, n: int, seed: int = 3) -> None:
    """NanoAOD-style jets (``Jet_pt/eta/phi/mass``, ~5 per event, some events with fewer than two)."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(5.0, n)
    total = int(counts.sum())
    jets = ak.zip({"pt": rng.exponential(40.0, total) + 20.0, "eta": rng.uniform(-2.5, 2.5, total),
                   "phi": rng.uniform(-np.pi, np.pi, total), "mass": rng.exponential(8.0, total)})
    with TreeWriter(path) as writer:
        writer.extend({"Jet": ak.unflatten(jets, counts), "event": np.arange(n, dtype=np.int64)})


def dijet_benchmark(n: int, repeat: int, workdir: Path, values: tuple[int, ...] = (1, 1000)) -> list[dict[str, Any]]:
    """``DijetMass`` in a job at each events-per-call value: the module's wall and CPU µs per event (the
    median of ``repeat`` jobs), from the job's own report. One event per call runs at most 1,000 events (it
    costs milliseconds each)."""
    src = workdir / "jets.root"
    write_jets_file(src, n)
    rows = []
    for value in values:
        runs = []
        for _ in range(repeat):
            events = n if value > 1 else min(n, 1000)
            data = {"process": "dijet", "source": {"files": [str(src)], "chunk_size": 1000, "max_events": events},
                    "modules": {"mjj": {"type": "DijetMass"}}, "output": {"products": ["mjj:mass"]},
                    "options": {"events_per_call": value, "progress": False}}
            report = Process(cfgmod.parse(data, file="<bench>")).run(progress=False).timing.report()
            (module,) = report["modules"]
            runs.append((1000 * module["wall_ms_per_event"], 1000 * module["cpu_ms_per_event"],
                         module["events_per_call"]))
        wall, cpu, per_call = sorted(runs)[(len(runs) - 1) // 2]
        rows.append({"events_per_call": value, "events": events, "us_per_event": wall, "cpu_us_per_event": cpu,
                     "events_per_module_call": per_call})
    return rows


def markdown(results: dict[str, Any]) -> str:
    sched, io, columnar, dijet = results["scheduler"], results["io"], results.get("columnar"), results.get("dijet")
    lines = [*header("sonic bench framework", results),
             "## Scheduler cost per module call (NullProducer chains)\n",
             "| streams | threads | events per batch | µs per module call | µs per event (fixed) |",
             "|---:|---:|---:|---:|---:|"]
    for row in sched:
        lines.append(f"| {row['streams']} | {row['threads']} | {row.get('events_per_call', '')} | "
                     f"{row['us_per_module_call']:.1f} | {row['us_per_event_fixed']:.1f} |")
    lines += ["", "Goal: ≤ 30 µs per module call.", ""]
    if columnar:
        fit = columnar["fit"]
        lines += ["## Columnar modules: overhead per call and per event (ColumnarNullProducer chains, 1 stream, "
                  "1 thread)\n",
                  f"Slope of wall time against chain length ({', '.join(map(str, columnar['chains']))} modules) at each "
                  "events-per-call value; µs per event (fixed) is the intercept: source, batches, end of job.\n",
                  "| events/call | calls per module | events | µs per module call | µs per event per module | "
                  "µs per event (fixed) |", "|---:|---:|---:|---:|---:|---:|"]
        for row in columnar["rows"]:
            lines.append(f"| {row['events_per_call']} | {row['calls_per_module']} | {row['events']} | "
                         f"{row['us_per_call']:.2f} | {row['us_per_event_per_module']:.3f} | {row['us_per_event_fixed']:.3f} |")
        lines += ["", "A slope at or below zero is below what the run resolves (the modules' time drowned in the "
                  "source's per-event time): raise --columnar-calls to resolve it.", "",
                  f"Fit of µs per module call = a + b·events: **a = {fit['us_per_call']:.1f} µs per call**, "
                  f"**b = {fit['us_per_event']:.4f} µs per event** (weighted by 1/time per call).", ""]
        goals = columnar["goals"]
        if "met" in goals:
            lines.append(f"Goals at 1,000 events per call: ≤ 30 µs per call (fit: {goals['us_per_call_fit']:.1f}), ≤ 1 µs "
                         f"per event per module (measured: {goals['us_per_event_per_module_at_1000']:.3f}): "
                         f"**{'met' if goals['met'] else 'NOT met'}**.\n")
        else:
            lines.append("Goals at 1,000 events per call: ≤ 30 µs per call, ≤ 1 µs per event per module "
                         "(not measured: 1000 is not among --events-per-call).\n")
    if dijet:
        lines += ["## The tutorial's columnar module (DijetMass, docs/modules.md), in a job\n",
                  "| events per call | events | µs per event (wall) | µs per event (CPU) |", "|---:|---:|---:|---:|"]
        for row in dijet:
            lines.append(f"| {row['events_per_call']} | {row['events']} | {row['us_per_event']:.1f} | "
                         f"{row['cpu_us_per_event']:.1f} |")
        at_1000 = [row for row in dijet if row["events_per_call"] == 1000]
        if at_1000:
            lines += ["", f"Goal: ≤ 20 µs per event at 1,000 events per call: "
                          f"**{'met' if at_1000[0]['us_per_event'] <= 20 else 'NOT met'}**.", ""]
    if io:
        lines += ["## Read + write: framework vs raw uproot (same file, same branches)\n",
                  "| layout | events | branches | raw uproot (s) | framework (s) | ratio |", "|---|---:|---:|---:|---:|---:|"]
        for row in io:
            lines.append(f"| {row['layout']} | {row['events']} | {row['branches']} | {row['raw_uproot_s']:.2f} | "
                         f"{row['framework_s']:.2f} | {row['ratio']:.2f} |")
        lines += ["", "Goal: ratio ≤ 1.25 (NanoAOD-like `full` layout; `slim` shows the fixed per-event cost).", ""]
    return "\n".join(lines)


def plot(sched: list[dict[str, Any]], io: list[dict[str, Any]], path: Path,
         columnar: dict[str, Any] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, c, b) = plt.subplots(1, 3, figsize=(15, 4))
    labels = [f"S{r['streams']}/T{r['threads']}" for r in sched]
    a.bar(labels, [r["us_per_module_call"] for r in sched], color="#4c72b0")
    a.axhline(30, color="red", linestyle="--", label="goal 30 µs")
    a.set_ylabel("µs per module call")
    a.set_title("scheduler overhead (per-event modules)")
    a.legend()
    if columnar and columnar["rows"]:
        resolved = [r for r in columnar["rows"] if r["us_per_call"] > 0]  # a slope ≤ 0 is noise: not drawn
        x = [r["events_per_call"] for r in resolved]
        c.loglog(x, [r["us_per_call"] for r in resolved], "o-", color="#4c72b0", label="µs per call")
        c.loglog(x, [r["us_per_event_per_module"] for r in resolved], "s-", color="#c44e52",
                 label="µs per event per module")
        c.axhline(30, color="#4c72b0", linestyle="--", linewidth=0.8)
        c.axhline(1, color="#c44e52", linestyle="--", linewidth=0.8)
        c.set_xlabel("events per call")
        c.set_title("columnar modules (goals: dashed)")
        c.legend()
    else:
        c.set_axis_off()
    if io:
        x = np.arange(len(io))
        b.bar(x - 0.2, [r["raw_us_per_event"] for r in io], 0.4, label="raw uproot", color="#55a868")
        b.bar(x + 0.2, [r["framework_us_per_event"] for r in io], 0.4, label="framework", color="#c44e52")
        b.set_xticks(x, [f"{r['layout']} ({r['branches']} br)\nratio {r['ratio']:.2f}" for r in io])
        b.set_ylabel("µs per event (read + write)")
        b.set_title("I/O (goal: ratio ≤ 1.25)")
        b.legend()
    else:
        b.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    report = BenchReport.start("framework", args.out)
    load_before = load_average()
    sched = scheduler_benchmark(args.events, args.modules, args.repeat)
    columnar = columnar_benchmark(args.events_per_call, args.modules, args.columnar_calls, args.repeat)
    io: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=report.out) as tmp:
        dijet = dijet_benchmark(args.dijet_events, args.repeat, Path(tmp)) if args.dijet_events > 0 else []
        if args.io_events > 0:  # 0 skips the I/O comparison
            io = [io_benchmark(args.io_events, args.repeat, Path(tmp), layout) for layout in ("full", "slim")]
    results = {**report.fields(), "load": describe_load(load_before, load_average()),
               "python": platform.python_version(), "scheduler": sched, "columnar": columnar, "dijet": dijet, "io": io}
    report.write(markdown(results), results, {"framework.png": lambda path: plot(sched, io, path, columnar)})
    return 0
