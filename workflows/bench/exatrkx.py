"""Exa.TrkX tracking: per-stage ms/event for direct, SONIC per stage and SONIC ensemble, side by side.

The seed's table (ATLAS/Exa.TrkX: direct 62 ms/evt vs as-a-service 64.4 ms/evt; embedding 0.5/1.7,
building 2.2/7.3, filtering 27.6/26.7, GNN 31.7/21.3 ms) for ``configs/exatrkx.yaml`` on ACTS events::

    sonic bench exatrkx --events 50                     # simulates the events, starts local Tritons
    sonic bench exatrkx --input exatrkx.root --server 10.0.0.7:8001

Runs over the same events, one stream and one thread so the stages add up to the event:

* **direct**: the ML stages in onnxruntime in this process; graph building and labeling here.
* **SONIC per stage**: each ML stage one request to Triton; graph building and labeling here.
* **SONIC ensemble**: one request per event to ``exatrkx_pipeline``; the per-stage times are the
  server's (Triton statistics: queue + compute per execution of each composing model), the event
  time is the client's round trip.

With a local server (no ``--server``) both SONIC runs are made twice, side by side: with the ONNX
stages on the python-based onnxruntime backend (``sonic-python``, ``ensemble-python``) and on the
native one (``sonic-native``, ``ensemble-native``); one local server per backend, started in turn.
With ``--server`` the runs are ``direct,sonic,ensemble`` on that server.

A stage's client-side time is acquire + wait for the result + produce. Each run also gives CPU per
event of the job and of the bench's local server (/proc of the server and its python stubs): on a
shared machine wall times move with the load; CPU says what each way costs. Track labels of the three
runs are compared hit by hit, and each run's tracking efficiency / fake rate / duplicate rate is
shown. Results go to ``--out``: ``exatrkx.md`` and ``exatrkx.json``.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import uproot

from ...framework import Process
from ...framework import config as cfgmod
from ...framework.inference.sonic import compute_ns
from ...modules.exatrkx.matching import MatchCounts
from ...modules.exatrkx.performance import summed_counts
from ._load import process_tree_cpu
from ._machine import CoreSplit
from ._report import BenchReport, header
from ._samples import generated_input

log = logging.getLogger(__name__)

#: table rows: (stage, module label in the per-stage runs, composing model of the ensemble)
STAGES = [("features", "features", None), ("embedding", "embedding", "exatrkx_embedding"),
          ("graph building", "graph", "exatrkx_graph_building"), ("filtering", "filter", "exatrkx_filter"),
          ("edge selection", None, "exatrkx_edge_selection"), ("GNN", "gnn", "exatrkx_gnn"),
          ("labeling", "labeling", "exatrkx_labeling")]
#: run name → (services.inference.mode, track labels product, backend of the local server: None = default)
RUNS = {"direct": ("direct", "labeling:labels", None), "sonic": ("sonic", "labeling:labels", None),
        "ensemble": ("sonic", "ensemble:labels", None),
        "sonic-python": ("sonic", "labeling:labels", "python"), "sonic-native": ("sonic", "labeling:labels", "native"),
        "ensemble-python": ("sonic", "ensemble:labels", "python"),
        "ensemble-native": ("sonic", "ensemble:labels", "native")}
TITLES = {"direct": "direct", "sonic": "SONIC per stage", "ensemble": "SONIC ensemble (server)",
          "sonic-python": "SONIC per stage, python-based", "sonic-native": "SONIC per stage, native",
          "ensemble-python": "SONIC ensemble, python-based (server)",
          "ensemble-native": "SONIC ensemble, native (server)"}
#: the runs without --server: both backends side by side
LOCAL_RUNS = "direct,sonic-python,ensemble-python,sonic-native,ensemble-native"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", help="events from `sonic data generate exatrkx` (default: simulate --events)")
    parser.add_argument("--events", type=int, default=50, help="events to simulate and process (default 50)")
    parser.add_argument("--seed", type=int, default=101, help="simulation seed when simulating")
    parser.add_argument("--runs", help=f"comma-separated, from {', '.join(RUNS)} (default: {LOCAL_RUNS}; "
                        "with --server: direct,sonic,ensemble)")
    parser.add_argument("--server", help="Triton server host:port (default: start one local server for both SONIC runs)")
    CoreSplit.add_arguments(parser, "the runs")
    parser.add_argument("--ort-threads", type=int, default=1,
                        help="onnxruntime threads per model instance of the local server (direct runs use 1)")
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                        help="configuration override, as for sonic run")


def stage_times(report: dict[str, Any]) -> dict[str, float]:
    """ms/event per module label: acquire + wait + produce for external work, else wall."""
    out = {}
    for m in report["modules"]:
        if m["kind"] == "external":
            out[m["label"]] = m["acquire_ms_per_event"] + m["wait_ms_per_event"] + m["produce_ms_per_event"]
        else:
            out[m["label"]] = m["wall_ms_per_event"]
    return out


def server_times(report: dict[str, Any], events: int) -> dict[str, float]:
    """Server-side ms/event per model: (queue + compute) summed over its executions, divided by events."""
    out: dict[str, float] = {}
    for models in (report.get("inference") or {}).get("servers", {}).values():
        for model, s in models.items():
            ns = s["queue_ns"] + compute_ns(s)
            out[model] = out.get(model, 0.0) + ns / 1e6 / max(events, 1)
    return out


def read_output(path: str) -> tuple[np.ndarray, MatchCounts]:
    """Hit labels (flat) and summed matching counts of one run's output file."""
    with uproot.open(path) as file:
        tree = file["Events"]
        labels = tree["HitTrack"].array(library="np")
        counts = summed_counts(tree)
    flat = np.concatenate(list(labels)) if len(labels) else np.zeros(0, np.int64)
    return flat, counts


def is_ensemble(name: str) -> bool:
    return RUNS[name][1] == "ensemble:labels"


def run_one(name: str, path: str, out: Path, server: str | None, args: argparse.Namespace,
            server_pid: int | None = None) -> dict[str, Any]:
    """One run; ``server_pid``: the local server's process, whose CPU (with its stubs) is counted per event."""
    mode, labels, _ = RUNS[name]
    output = out / f"exatrkx_{name}.root"
    overrides = [f"source.files=['{path}']", f"services.inference.mode={mode}", f"tracks.labels={labels}",
                 f"options.streams={args.streams}", f"options.threads={args.threads}", "options.progress=false",
                 f"output.file='{output}'", *args.param]
    if mode == "sonic" and server:
        overrides.append(f"services.inference.servers=['{server}']")
    server_cpu = process_tree_cpu(server_pid) if server_pid else None
    result = Process(cfgmod.load("exatrkx", overrides)).run(progress=False)
    if server_pid:
        server_cpu = process_tree_cpu(server_pid) - server_cpu
    report = result.timing.report()
    events = report["events"]
    hit_labels, counts = read_output(str(output))
    return {"run": name, "events": events, "event_ms": 1000.0 * report["wall_s"] / max(events, 1),
            "events_per_s": report["events_per_s"], "modules": stage_times(report),
            "job_cpu_ms": 1000.0 * report["cpu_s"] / max(events, 1),
            "server_cpu_ms": None if server_cpu is None else 1000.0 * server_cpu / max(events, 1),
            "server_ms": server_times(report, events), "counts": counts.as_dict(),
            "efficiency": counts.efficiency, "fake_rate": counts.fake_rate, "duplicate_rate": counts.duplicate_rate,
            "output": str(output), "_labels": hit_labels}


def markdown(results: dict[str, Any]) -> str:
    runs = results["runs"]
    lines = [*header("sonic bench exatrkx", results,
                     f"Input: {results['input']} ({runs[0]['events']} events, {results['hits_per_event']:.0f} "
                     f"hits/event), {results['streams']} stream(s), {results['threads']} thread(s)",
                     f"CPU pinning: {results.get('pinning', 'none')}; local server: "
                     f"{results.get('server_ort_threads', 1)} onnxruntime thread(s) per model instance"),
             "| stage | " + " | ".join(f"{TITLES[r['run']]} ms/evt" for r in runs) + " |",
             "|---|" + "---:|" * len(runs)]
    for stage, label, model in STAGES:
        cells = []
        for r in runs:
            value = r["server_ms"].get(model) if is_ensemble(r["run"]) else r["modules"].get(label)
            if is_ensemble(r["run"]) and label == "features":
                value = r["modules"].get(label)
            cells.append("—" if value is None else f"{value:.2f}")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    totals = []
    for r in runs:
        if is_ensemble(r["run"]):
            totals.append(f"{r['modules'].get('ensemble', 0.0):.2f} (round trip)")
        else:
            totals.append(f"{sum(r['modules'].get(label, 0.0) for _, label, _ in STAGES if label):.2f}")
    lines.append("| **pipeline** | " + " | ".join(f"**{t}**" for t in totals) + " |")
    lines.append("| whole event | " + " | ".join(f"{r['event_ms']:.2f}" for r in runs) + " |")
    lines.append("| CPU: job (+ local server) | " + " | ".join(
        f"{r['job_cpu_ms']:.1f}" + ("" if r.get("server_cpu_ms") is None else
                                    f" + {r['server_cpu_ms']:.1f} = {r['job_cpu_ms'] + r['server_cpu_ms']:.1f}")
        for r in runs) + " |")
    lines.append("")
    if any(is_ensemble(r["run"]) for r in runs):
        lines.append("Ensemble column: features and the round trip are measured by the client, the stages are the "
                     "server's queue + compute time per event (Triton statistics).\n")
    for r in runs:
        lines.append(f"- {TITLES[r['run']]}: {r['events_per_s']:.1f} events/s; {MatchCounts(**r['counts']).summary(1.0)}")
    lines.append(f"\nTrack labels identical to {TITLES[runs[0]['run']]}, hit by hit: "
                 + ", ".join(f"{TITLES[k]}: {'yes' if v else 'NO'}" for k, v in results["labels_equal"].items()))
    for name, reason in results.get("unavailable", {}).items():
        lines.append(f"\n{TITLES[name]}: not measured: {reason}")
    return "\n".join(lines) + "\n"


def start_local(backend: str | None, cores: CoreSplit, args: argparse.Namespace) -> Any:
    """The bench's local server on ``backend`` (None: the default), or why the native one cannot start (a
    machine without a C++ compiler still measures the rest)."""
    from ...framework.errors import InferenceError
    from ...framework.inference.serving import TritonServer
    from ...framework.inference import resolve_repository

    options = {"backend": backend} if backend else {}
    try:
        return TritonServer([resolve_repository("data/models/exatrkx")], cpus=cores.server_cpus,
                            ort_threads=args.ort_threads, **options).start()
    except InferenceError as err:
        if backend != "native":
            raise
        log.warning("sonic bench exatrkx: the native backend is not available: %s", str(err).splitlines()[0])
        return str(err).splitlines()[0]


def stop_local(local: dict[str | None, Any]) -> None:
    for server in local.values():
        if not isinstance(server, str):
            server.stop()


def run(args: argparse.Namespace) -> int:
    report = BenchReport.start("exatrkx", args.out)  # before the pinning narrows the machine this process sees
    out = report.out
    path = args.input or generated_input(out, "exatrkx", args.events, args.seed)
    names = [n.strip() for n in (args.runs or ("direct,sonic,ensemble" if args.server else LOCAL_RUNS)).split(",")
             if n.strip()]
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        raise SystemExit(f"sonic bench exatrkx: unknown run(s) {unknown}; choose from {list(RUNS)}")
    if args.server and any(RUNS[n][2] for n in names):
        raise SystemExit("sonic bench exatrkx: runs naming a backend start their own local server; with --server "
                         "use --runs direct,sonic,ensemble")
    cores = CoreSplit(args.server_cpus)
    everything = os.sched_getaffinity(0)
    runs, unavailable = [], {}
    local: dict[str | None, Any] = {}  # backend → its local server (or why it could not start), one at a time
    try:
        for name in names:
            mode, _, backend = RUNS[name]
            server = args.server
            if mode == "sonic" and server is None:
                if backend not in local:
                    stop_local(local)
                    os.sched_setaffinity(0, everything)  # a server's cores must be this process's
                    local = {backend: start_local(backend, cores, args)}
                if isinstance(local[backend], str):
                    unavailable[name] = local[backend]
                    continue
                server = local[backend].grpc_url
            cores.pin_clients()
            local_server = local.get(backend) if mode == "sonic" and args.server is None else None
            runs.append(run_one(name, path, out, server, args, getattr(local_server, "pid", None)))
    finally:
        stop_local(local)
    with uproot.open(path) as file:
        hits = float(np.mean(file["Events"]["nHit"].array(library="np")))
    reference = runs[0]["_labels"]
    results = {**report.fields(), "input": os.path.basename(path), "hits_per_event": hits,
               "streams": args.streams, "threads": args.threads, "server": args.server or "local (started by the bench)",
               "unavailable": unavailable,
               "pinning": cores.describe(), "server_ort_threads": args.ort_threads,
               "labels_equal": {r["run"]: bool(np.array_equal(r["_labels"], reference)) for r in runs[1:]},
               "runs": [{k: v for k, v in r.items() if not k.startswith("_")} for r in runs]}
    report.write(markdown(results), results)
    return 0
