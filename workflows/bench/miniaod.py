"""CMS MiniAOD demonstrator: per-module time (ms/event and fraction of the event), direct vs SONIC.

The table CMS showed for its SONIC demonstrator (ParticleNet-AK4 42 ms, AK8 11 ms, DeepMET 13 ms,
DeepTau 21 ms of a 993 ms event; inputs 0.04 / 0.003 / 0.33 / 1.18 MB), for ``configs/miniaod.yaml``
on generated events, with the models run in-process (direct) and on Triton (SONIC) in one run::

    sonic bench miniaod --events 100                       # generates the events, starts local Tritons
    sonic bench miniaod --input ttbar.root --server 10.0.0.7:8001 --config miniaod_cms --modes direct,sonic

Modes: ``direct`` (onnxruntime in the job), ``sonic-python`` and ``sonic-native`` (a local Triton
server started by the bench before the runs, ONNX models on the python-based or the native onnxruntime
backend, side by side), ``sonic`` (the servers given with ``--server``, or the job's own fallback server).
Besides wall time per event, each run gives the CPU time per event of the job and of its local server
(/proc of the server and its python stubs): on a shared machine the kernel's sharing of the cores
between job and server moves the wall-time ratio; the CPU ratio is what the service costs.
``--repeat N`` runs every mode N times, interleaved (so a change in the load of a shared machine hits
every mode alike), and reports each mode's run of median event time.

Per event or in batches: ``--events-per-call 1,auto`` (the default) runs every mode at every value
(``options.events_per_call``: 1 is CMSSW's one event per module call; ``auto`` lets the scheduler choose
within ``options.memory_mb``), interleaved with the repeats, each run labelled ``mode@value`` (``auto``
with the value the scheduler chose, e.g. ``direct@auto(500)``). Python's cost is per call, not per
event, so the table that matters for columnar modules is what a batch saves: per run, the job's CPU per
event, the time spent in the models (the inference client's own seconds: in direct mode onnxruntime's
run at the batch size the run used, the floor no framework can go under), the rest of the job's CPU
("not in model calls"), requests per event and rows per request per model, and for SONIC the job's CPU
per request. The summary gives each mode's speed-up of auto over 1 and SONIC ÷ direct at the same value.

A module's time is its acquire (input building) + the inference of its requests (onnxruntime run, or
the Triton round trip, from the inference client's statistics) + its produce, per event, with one
stream, one thread and one inference worker (``--streams/--threads`` to change); "% of event" divides
it by the wall time per event. The modules' sum may exceed the event by the overlap ExternalWork allows
(one module builds inputs while another's inference runs). The input size is what the producer sends
per event (CMS's layouts, float32), counted at its inference calls in the first mode's run itself: the
producers' own preprocessing, never a copy of it here (a model two modules share counts for each). The
outputs of every run are compared with the first's (largest difference of any written value): batched
onnxruntime calls may round differently from one event at a time, and the page says by how much. Results go
to ``--out`` (by default a git-ignored folder, never the package): ``miniaod.md``, ``miniaod.json``.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import statistics
from pathlib import Path
from typing import Any

from ...framework import Process
from ...framework import config as cfgmod
from ...framework.errors import SonicError
from ...framework.inference.serving import TritonServer
from ...framework.inference import resolve_repository
from ..compare import compare_files
from ._machine import CoreSplit, describe_load, load_average
from ._report import BenchReport, header
from ._samples import generated_input
from ._load import process_tree_cpu

log = logging.getLogger(__name__)


#: mode name → (services.inference.mode, backend of the job's local server: None = the default)
MODES = {"direct": ("direct", None), "sonic": ("sonic", None), "sonic-python": ("sonic", "python"),
         "sonic-native": ("sonic", "native")}


def algorithm(module_type: str) -> str:
    """The algorithm's name for the table: the module type without its role suffix (ParticleNetTagger →
    ParticleNet, DeepMETProducer → DeepMET); any other type as it is."""
    return re.sub(r"(?<=.)(Tagger|Producer)$", "", module_type)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", help="MiniAOD-like ROOT file (default: generate --events events)")
    parser.add_argument("--events", type=int, default=100, help="events to generate and process")
    parser.add_argument("--seed", type=int, default=11, help="generator seed when generating")
    parser.add_argument("--config", default="miniaod", help="configuration (miniaod, miniaod_cms or a file)")
    parser.add_argument("--modes", default="direct,sonic-python,sonic-native",
                        help=f"comma-separated: {', '.join(MODES)}")
    parser.add_argument("--events-per-call", default="1,auto", metavar="LIST",
                        help="comma-separated options.events_per_call values, every mode run at each: an integer "
                             "(1: one event per module call, as CMSSW) or auto (the scheduler's choice within "
                             "options.memory_mb)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per mode and value, interleaved; each one's run of median event time is reported")
    parser.add_argument("--server", action="append", help="Triton server for sonic (default: a local one)")
    CoreSplit.add_arguments(parser, "the jobs", choice=True)
    parser.add_argument("--streams", type=int, default=1, help="events in flight")
    parser.add_argument("--threads", type=int, default=1, help="worker threads")
    parser.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                        help="configuration override, as for sonic run (e.g. services.inference.repository=[dir])")


def parse_events_per_call(text: str) -> list[int]:
    """``--events-per-call``: the values in order, ``auto`` as 0 (the configuration's own spelling of "let the
    scheduler choose"); a repeated value would only run the same jobs twice, so it is refused."""
    values = []
    for word in (w.strip().lower() for w in text.split(",")):
        if not word:
            continue
        try:
            value = 0 if word == "auto" else int(word)
        except ValueError:
            raise SystemExit(f"sonic bench miniaod: --events-per-call takes integers or auto, not {word!r}") from None
        if value < 0:
            raise SystemExit(f"sonic bench miniaod: --events-per-call {value}: must be at least 1 (or auto)")
        if value in values:
            raise SystemExit(f"sonic bench miniaod: --events-per-call names {word} twice")
        values.append(value)
    if not values:
        raise SystemExit("sonic bench miniaod: --events-per-call is empty")
    return values


def value_name(requested: int) -> str:
    """A requested ``events_per_call`` as the command line spells it (0 is ``auto``)."""
    return "auto" if requested == 0 else str(requested)


def run_label(mode: str, requested: int, chosen: int | None = None) -> str:
    """``direct@1``, ``sonic-native@auto(500)``: the mode, the value asked for and, for auto, what the
    scheduler chose (the reader must know the batch size a figure was measured at)."""
    value = value_name(requested)
    if requested == 0 and chosen is not None:
        value += f"({chosen})"
    return f"{mode}@{value}"


def job_overrides(path: str, name: str, out: Path, args: argparse.Namespace,
                  events_per_call: int | None = None) -> list[str]:
    """The configuration of one mode's job. Direct mode runs as many onnxruntime calls at once as the
    job has worker threads, as in a CMSSW job where each thread runs its own module's model: fixed at
    one, a multi-threaded direct job would queue its models behind each other and make SONIC look
    better than it is. ``events_per_call`` (None: the configuration's) sets the batch size; each value
    writes its own output file, so every run can be compared with the first. ``--param`` comes last
    and wins."""
    mode, _ = MODES[name]
    batch = [] if events_per_call is None else [f"options.events_per_call={events_per_call}"]
    suffix = "" if events_per_call is None else f"_epc{value_name(events_per_call)}"
    return [f"source.files=['{path}']", f"services.inference.mode={mode}", f"options.streams={args.streams}",
            f"options.threads={args.threads}", "options.progress=false", f"services.inference.workers={args.threads}",
            *batch, f"output.file='{out / f'miniaod_{name}{suffix}.root'}'", *args.param]


def model_figures(per_model: dict[str, dict[str, Any]], events: int) -> dict[str, dict[str, float]]:
    """Per model, from the inference client's counters: module calls into the client, requests (a call
    split at ``max_batch_size`` or by ragged shapes sends several), rows (batch entries), and what they
    come to per event: a columnar producer makes one call per batch, so its requests per event fall
    and its rows per request grow with the batch."""
    figures = {}
    for model, c in per_model.items():
        requests = int(c.get("requests", 0))
        figures[model] = {"calls": int(c.get("calls", 0)), "requests": requests, "rows": int(c.get("rows", 0)),
                          "seconds": float(c.get("seconds", 0.0)), "requests_per_event": requests / events,
                          "rows_per_request": c.get("rows", 0) / requests if requests else 0.0,
                          "ms_per_event": 1000.0 * c.get("seconds", 0.0) / events}
    return figures


def run_mode(config_name: str, path: str, name: str, out: Path, args: argparse.Namespace,
             server: TritonServer | None = None, events_per_call: int | None = None) -> dict[str, Any]:
    """One run of ``name`` at ``events_per_call`` (None: the configuration's); ``server`` is the bench's
    local server for a mode that names a backend."""
    overrides = job_overrides(path, name, out, args, events_per_call)
    if name == "sonic" and args.server:
        overrides.append("services.inference.servers=[" + ", ".join(f"'{s}'" for s in args.server) + "]")
    if server is not None:
        overrides += [f"services.inference.servers=['{server.grpc_url}']", "services.inference.fallback=false"]
    config = cfgmod.load(config_name, overrides)
    process = Process(config)
    server_cpu = process_tree_cpu(server.pid) if server is not None else None
    result = process.run(progress=False)
    if server is not None:
        server_cpu = process_tree_cpu(server.pid) - server_cpu
    report = result.timing.report()
    events = max(report["events"], 1)
    event_ms = 1000.0 * report["wall_s"] / events
    per_model = (report.get("inference") or {}).get("models", {})
    modules = []
    # each module's model as the module itself resolved it (its parameter's default included)
    models = {label: getattr(module, "model", None) for label, module in process.prototypes.items()}
    for m in report["modules"]:
        model = models[m["label"]]
        infer_ms = 1000.0 * per_model.get(model, {}).get("seconds", 0.0) / events if model else 0.0
        cpu_ms = m.get("acquire_ms_per_event", 0) + m.get("produce_ms_per_event", 0) if m["kind"] == "external" \
            else m["wall_ms_per_event"]
        modules.append({"label": m["label"], "type": m["type"], "ms_per_event": cpu_ms + infer_ms,
                        "fraction": (cpu_ms + infer_ms) / event_ms, "acquire_ms": m.get("acquire_ms_per_event"),
                        "inference_ms": infer_ms, "produce_ms": m.get("produce_ms_per_event"),
                        "wait_ms": m.get("wait_ms_per_event"), "invocations": m.get("invocations"),
                        "events_per_call": m.get("events_per_call")})
    # what each producer's own requests carried in this very run, counted by the job's inference client
    sent_by_model = {model: counters.get("bytes_sent", 0) for model, counters in per_model.items()}
    input_mb = {m["label"]: sent_by_model.get(models[m["label"]], 0) / events / 1e6 for m in report["modules"]}
    job_cpu_ms = 1000.0 * report["cpu_s"] / events
    figures = model_figures(per_model, events)
    model_ms = sum(f["ms_per_event"] for f in figures.values())
    requests = sum(f["requests"] for f in figures.values())
    direct = MODES[name][0] == "direct"
    requested = config.options.events_per_call if events_per_call is None else events_per_call
    chosen = int(report.get("events_per_call", 1))
    return {"mode": name, "label": run_label(name, requested, chosen), "events_per_call_requested": requested,
            "events_per_call": chosen,
            # what the modules got: a batch never spans two chunks nor passes the file's end
            "events_per_module_call": max((m.get("events_per_call") or 0.0 for m in report["modules"]), default=0.0),
            "events": report["events"], "event_ms": event_ms, "job_cpu_ms": job_cpu_ms,
            "server_cpu_ms": None if server_cpu is None else 1000.0 * server_cpu / events, "events_per_s": report["events_per_s"],
            "model_ms": model_ms,
            # direct: the job's CPU outside onnxruntime's runs; SONIC: the job runs no model, all its CPU is outside
            "not_in_model_ms": job_cpu_ms - model_ms if direct else job_cpu_ms,
            "requests": requests, "requests_per_event": requests / events,
            "client_cpu_ms_per_request": None if direct or not requests else 1000.0 * report["cpu_s"] / requests,
            "model_counters": figures,
            "modules": modules, "inference": report.get("inference"), "output": result.output,
            "models": {label: model or "" for label, model in models.items()}, "input_mb": input_mb}


def _cell(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def module_table(runs: list[dict[str, Any]], results: dict[str, Any]) -> list[str]:
    """The per-module table (CMS's layout) of ``runs``, one pair of columns per run."""
    names = [r["label"] for r in runs]
    lines = ["| module | algorithm | model | input MB/evt | " + " | ".join(
        f"{m} ms/evt | {m} % of event" for m in names) + " |", "|" + "---|" * (4 + 2 * len(names))]
    for i, module in enumerate(runs[0]["modules"]):
        cells = []
        for run in runs:
            m = run["modules"][i]
            cells += [f"{m['ms_per_event']:.1f}", f"{100 * m['fraction']:.1f} %"]
        label = module["label"]
        lines.append(f"| {label} | {algorithm(module['type'])} | {results['models'].get(label, '')} | "
                     f"{results['input_mb'].get(label, 0):.3f} | " + " | ".join(cells) + " |")
    lines.append("| sum of modules | | | | " + " | ".join(
        f"{sum(m['ms_per_event'] for m in r['modules']):.1f} | {100 * sum(m['fraction'] for m in r['modules']):.1f} %"
        for r in runs) + " |")
    lines.append("| **event** (wall) | | | | " + " | ".join(f"**{r['event_ms']:.1f}** | 100 %" for r in runs) + " |")
    lines.append("| CPU: job (+ server) ms/evt | | | | " + " | ".join(
        f"{r['job_cpu_ms']:.1f}" + ("" if r.get("server_cpu_ms") is None else
                                    f" + {r['server_cpu_ms']:.1f} = {r['job_cpu_ms'] + r['server_cpu_ms']:.1f}")
        + " |" for r in runs) + " |")
    return lines


#: what the columns of the batches table mean (printed under it)
DEFINITIONS = [
    "**evt/call**: `options.events_per_call` the scheduler used (auto: its choice within `options.memory_mb`) · "
    "the mean events per call the modules got (a batch never spans two chunks nor passes the input's end)",
    "**model-only**: the inference client's own (wall-clock) time in its requests, summed over models, per event; "
    "direct: onnxruntime's run at the batch size the run used (the floor of the job's time); SONIC: the round "
    "trips. On a machine busier than its cores, a run's wall clock also counts the time it waited for a core, "
    "so the column can exceed the CPU it stands for",
    "**not in model calls**: direct: job CPU − model-only (everything the framework and the modules do around "
    "onnxruntime: reading, input building, unpacking, output; negative only where model-only counted waits for a "
    "core); SONIC: the job's whole CPU (the model runs in the server, whose CPU is a column of its own)",
    "**requests/evt**: requests sent, all models, per event; **client CPU/request**: SONIC only, job CPU ÷ requests",
]


def markdown(results: dict[str, Any]) -> str:
    runs = results["runs"]
    lines = header("sonic bench miniaod", results,
                   f"Input: {results['input']} ({runs[0]['events']} events), config {results['config']}, "
                   f"{results['streams']} stream(s), {results['threads']} thread(s)",
                   f"CPU pinning: {results.get('pinning', 'none')}")
    repeat = results.get("repeat", 1)
    lines += [f"## Per event or in batches{' (each run: the median of ' + str(repeat) + ')' if repeat > 1 else ''}\n",
              "| run | evt/call | ms/event | events/s | job CPU ms/evt | server CPU ms/evt | model-only ms/evt | "
              "not in model calls ms/evt | requests/evt | client CPU ms/request |", "|---|---|" + "---:|" * 8]
    for r in runs:
        lines.append(f"| {r['label']} | {r['events_per_call']} · {r['events_per_module_call']:.1f} | {r['event_ms']:.2f} | "
                     f"{r['events_per_s']:.1f} | {r['job_cpu_ms']:.2f} | {_cell(r.get('server_cpu_ms'), 2)} | "
                     f"{r['model_ms']:.2f} | {r['not_in_model_ms']:.2f} | {r['requests_per_event']:.3f} | "
                     f"{_cell(r.get('client_cpu_ms_per_request'), 3)} |")
    lines += [""] + [f"- {d}" for d in DEFINITIONS]
    models = sorted({model for r in runs for model in r["model_counters"]})
    if models:
        lines += ["", "Requests per event · rows per request, per model (the inference client's counters):\n",
                  "| run | " + " | ".join(models) + " |", "|---|" + "---:|" * len(models)]
        for r in runs:
            cells = [(f"{c['requests_per_event']:.3f} · {c['rows_per_request']:.1f}" if c else "–")
                     for c in (r["model_counters"].get(m) for m in models)]
            lines.append(f"| {r['label']} | " + " | ".join(cells) + " |")
    summary = results.get("summary", {})
    if summary.get("batches"):
        lines.append("\n**Batches** (median over repeats of each repeat's ratio):")
        for b in summary["batches"]:
            lines.append(f"- {b['mode']}: {b['label']} vs {b['baseline']}: events/s **×{b['speedup']:.2f}**, "
                         f"not-in-model time ×{b['not_in_model_ratio']:.2f} "
                         f"({b['baseline_not_in_model_ms']:.2f} → {b['not_in_model_ms']:.2f} ms/evt)")
    if summary.get("sonic_vs_direct"):
        lines.append("\n**SONIC ÷ direct** at the same events per call (median over repeats of each repeat's ratio; "
                     "CPU: job + its local server ÷ direct job):")
        for s in summary["sonic_vs_direct"]:
            cpu = "" if s.get("cpu_ratio") is None else f", CPU ×{s['cpu_ratio']:.2f}"
            lines.append(f"- @{s['events_per_call']}: {s['mode']} event time **×{s['event_time_ratio']:.2f}**{cpu}")
    for value in results.get("events_per_call_values", [runs[0]["events_per_call_requested"]]):
        chosen = [r for r in runs if r["events_per_call_requested"] == value]
        if chosen:
            lines += ["", f"## Per module, events per call {value_name(value)}\n", *module_table(chosen, results)]
    lines.append("")
    lines.append(" · ".join(f"{r['label']}: {r['events_per_s']:.1f} events/s" for r in runs))
    if repeat > 1:
        lines.append(f"\nEach run of median event time of {repeat} (interleaved); all runs, ms/event: "
                     + " · ".join(f"{r['label']} {', '.join(f'{t:.1f}' for t in r['repeats_event_ms'])}" for r in runs))
    first = runs[0]["label"]
    if results.get("comparisons"):
        lines.append(f"\nOutputs of every run against {first}'s: largest |difference| "
                     f"**{results['max_difference']:.3g}** ({results['comparison']})")
        for label, comparison in results["comparisons"].items():
            lines.append(f"- {label}: {comparison['summary']}")
    if results.get("mode_comparisons"):
        lines.append("\nModes against each other at the same events per call:")
        for label, comparison in results["mode_comparisons"].items():
            lines.append(f"- {label} vs {comparison['against']}: {comparison['summary']}")
    for mode, reason in results.get("unavailable", {}).items():
        lines.append(f"\n{mode}: not measured: {reason}")
    return "\n".join(lines) + "\n"


def median_ratio(numerators: list[float], denominators: list[float]) -> float | None:
    """The median of the per-repeat ratios: runs of one repeat ran next to each other, so their ratio
    sees the same machine load, which a ratio of medians would not."""
    ratios = [a / b for a, b in zip(numerators, denominators) if b]
    return statistics.median(ratios) if ratios else None


def summarise(repeats: dict[tuple[str, int], list[dict[str, Any]]], modes: list[str],
              values: list[int]) -> dict[str, Any]:
    """Each mode's speed-up of every value over the first (``auto`` over 1 by default) and SONIC ÷ direct at
    each value, from the paired runs of each repeat."""
    batches, sonic = [], []
    base = values[0]
    for mode in modes:
        for value in values[1:]:
            a, b = repeats.get((mode, value)), repeats.get((mode, base))
            if not a or not b:
                continue
            speedup = median_ratio([r["events_per_s"] for r in a], [r["events_per_s"] for r in b])
            nim = median_ratio([r["not_in_model_ms"] for r in a], [r["not_in_model_ms"] for r in b])
            batches.append({"mode": mode, "label": run_label(mode, value, a[0]["events_per_call"]).split("@")[1],
                            "baseline": run_label(mode, base, b[0]["events_per_call"]).split("@")[1],
                            "speedup": speedup, "not_in_model_ratio": nim,
                            "not_in_model_ms": statistics.median(r["not_in_model_ms"] for r in a),
                            "baseline_not_in_model_ms": statistics.median(r["not_in_model_ms"] for r in b)})
    for value in values:
        direct = repeats.get(("direct", value))
        if not direct:
            continue
        for mode in (m for m in modes if MODES[m][0] == "sonic"):
            runs = repeats.get((mode, value))
            if not runs:
                continue
            cpu = None
            if all(r.get("server_cpu_ms") is not None for r in runs):
                cpu = median_ratio([r["job_cpu_ms"] + r["server_cpu_ms"] for r in runs], [r["job_cpu_ms"] for r in direct])
            sonic.append({"mode": mode, "events_per_call": run_label(mode, value, runs[0]["events_per_call"]).split("@")[1],
                          "event_time_ratio": median_ratio([r["event_ms"] for r in runs], [r["event_ms"] for r in direct]),
                          "cpu_ratio": cpu})
    return {"batches": batches, "sonic_vs_direct": sonic}


def local_server(args: argparse.Namespace, backend: str, cpus: list[int] | None = None) -> TritonServer:
    """A server of the configuration's model repositories whose ONNX models run on ``backend``."""
    config = cfgmod.load(args.config, list(args.param))
    folders = config.services.get("inference", {}).get("repository") or []
    folders = [folders] if isinstance(folders, str) else folders
    return TritonServer([resolve_repository(str(f)) for f in folders], backend=backend, cpus=cpus).start()


def run(args: argparse.Namespace) -> int:
    values = parse_events_per_call(args.events_per_call)  # a typo fails before events are generated
    report = BenchReport.start("miniaod", args.out)  # before the pinning narrows the machine this process sees
    out = report.out
    path = args.input or generated_input(out, "miniaod", args.events, args.seed)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise SystemExit(f"sonic bench miniaod: unknown mode(s) {unknown}; choose from {list(MODES)}")
    if args.server and any(MODES[m][1] for m in modes):
        raise SystemExit("sonic bench miniaod: --server is for mode 'sonic' (the sonic-python/sonic-native modes "
                         "start their own local server): use --modes direct,sonic")
    repeats: dict[tuple[str, int], list[dict[str, Any]]] = {(mode, v): [] for mode in modes for v in values}
    unavailable: dict[str, str] = {}
    servers: dict[str, TritonServer] = {}
    load_before = load_average()
    cores = CoreSplit(args.server_cpus, args.client_cpus)
    try:
        for mode in modes:  # one local server per backend, up for the whole bench (its start is no event's time)
            backend = MODES[mode][1]
            if backend is not None and backend not in servers:
                try:
                    servers[backend] = local_server(args, backend, cores.server_cpus)
                except SonicError as err:
                    if backend != "native":
                        raise
                    unavailable[mode] = str(err).splitlines()[0]  # e.g. no C++ compiler here: said, not fatal
                    log.warning("sonic bench miniaod: mode %s skipped: %s", mode, unavailable[mode])
        cores.pin_clients()
        for _ in range(max(1, args.repeat)):
            for mode in modes:  # interleaved: a change in the machine's load hits every mode and value alike
                if mode in unavailable:
                    continue
                server = servers.get(MODES[mode][1]) if MODES[mode][1] else None
                for value in values:
                    repeats[(mode, value)].append(run_mode(args.config, path, mode, out, args, server, value))
    finally:
        for server in servers.values():
            server.stop()
    runs = []
    for mode in modes:
        for value in values:
            if not repeats[(mode, value)]:
                continue
            ordered = sorted(repeats[(mode, value)], key=lambda r: r["event_ms"])
            run = dict(ordered[(len(ordered) - 1) // 2])
            run["repeats_event_ms"] = [r["event_ms"] for r in repeats[(mode, value)]]
            runs.append(run)
    if not runs:
        raise SystemExit(f"sonic bench miniaod: no mode could run: {unavailable}")
    results: dict[str, Any] = {
        **report.fields(), "pinning": cores.describe(), "load": describe_load(load_before, load_average()),
        "input": os.path.basename(path), "config": args.config, "streams": args.streams, "threads": args.threads,
        "repeat": max(1, args.repeat), "events_per_call_values": values, "runs": runs, "unavailable": unavailable,
        "summary": summarise(repeats, modes, values),
    }
    first = runs[0]
    results.update(models=first.get("models", {}), input_mb=first.get("input_mb", {}))
    results["ratios"] = {r["label"]: r["event_ms"] / first["event_ms"] for r in runs[1:]}
    total = {r["label"]: r["job_cpu_ms"] + (r.get("server_cpu_ms") or 0.0) for r in runs}
    results["cpu_ratios"] = {r["label"]: total[r["label"]] / total[first["label"]] for r in runs[1:]
                             if r.get("server_cpu_ms") is not None or MODES[r["mode"]][0] == "direct"}
    results["comparisons"] = {}
    for other in runs[1:]:
        comparison = compare_files(first["output"], other["output"])
        results["comparisons"][other["label"]] = {"max_difference": comparison.worst, "equal": comparison.equal(),
                                                  "summary": comparison.summary().splitlines()[0]}
    if results["comparisons"]:  # all runs against the first, in one figure and one line
        worst = max(results["comparisons"].items(), key=lambda item: item[1]["max_difference"])
        results.update(max_difference=worst[1]["max_difference"],
                       outputs_equal=all(c["equal"] for c in results["comparisons"].values()),
                       comparison=f"{worst[0]}: {worst[1]['summary']}")
    # the modes against each other at one batch size: SONIC must give what direct gives for the same inputs,
    # while a batch may legitimately change them (a model padded across a batch's jets sees other padding)
    results["mode_comparisons"] = {}
    for value in values:
        same = [r for r in runs if r["events_per_call_requested"] == value]
        for other in same[1:]:
            comparison = compare_files(same[0]["output"], other["output"])
            results["mode_comparisons"][other["label"]] = {
                "against": same[0]["label"], "max_difference": comparison.worst, "equal": comparison.equal(),
                "summary": comparison.summary().splitlines()[0]}
    if results["mode_comparisons"]:
        results["outputs_equal_across_modes"] = all(c["equal"] for c in results["mode_comparisons"].values())
    report.write(markdown(results), results)
    return 0
