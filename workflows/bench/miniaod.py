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

A module's time is its acquire (input building) + the inference of its requests (onnxruntime run, or
the Triton round trip, from the inference client's statistics) + its produce, per event, with one
stream, one thread and one inference worker (``--streams/--threads`` to change); "% of event" divides
it by the wall time per event. The modules' sum may exceed the event by the overlap ExternalWork allows
(one module builds inputs while another's inference runs). The input size is what the producer sends
per event (CMS's layouts, float32), counted at its inference calls in the first mode's run itself: the
producers' own preprocessing, never a copy of it here (a model two modules share counts for each). The
outputs of every mode are compared with the first's (largest difference of any written value). Results go
to ``--out``: ``miniaod.md``, ``miniaod.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from ...framework import Process
from ...framework import config as cfgmod
from ...framework.errors import SonicError
from ...framework.inference.server import TritonServer
from ...framework.inference.service import resolve_repository
from ..compare import compare_files
from ._machine import CoreSplit, bench_command, machine_description
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
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per mode, interleaved; each mode's run of median event time is reported")
    parser.add_argument("--server", action="append", help="Triton server for sonic (default: a local one)")
    parser.add_argument("--server-cpus", metavar="LIST",
                        help="pin the bench's local servers to these cores (e.g. 0-3) and the jobs to the rest "
                             "(default: no pinning)")
    parser.add_argument("--client-cpus", choices=("rest", "all"), default="rest",
                        help="with --server-cpus: the jobs on the cores the servers leave (rest), or on every core, "
                             "the servers' too (all: only the server is confined, as on a small machine whose job "
                             "starts its own server)")
    parser.add_argument("--streams", type=int, default=1, help="events in flight")
    parser.add_argument("--threads", type=int, default=1, help="worker threads")
    parser.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                        help="configuration override, as for sonic run (e.g. services.inference.repository=[dir])")


def job_overrides(path: str, name: str, out: Path, args: argparse.Namespace) -> list[str]:
    """The configuration of one mode's job. Direct mode runs as many onnxruntime calls at once as the
    job has worker threads, as in a CMSSW job where each thread runs its own module's model: fixed at
    one, a multi-threaded direct job would queue its models behind each other and make SONIC look
    better than it is. ``--param`` comes last and wins."""
    mode, _ = MODES[name]
    return [f"source.files=['{path}']", f"services.inference.mode={mode}", f"options.streams={args.streams}",
            f"options.threads={args.threads}", "options.progress=false", f"services.inference.workers={args.threads}",
            f"output.file='{out / f'miniaod_{name}.root'}'", *args.param]


def run_mode(config_name: str, path: str, name: str, out: Path, args: argparse.Namespace,
             server: TritonServer | None = None) -> dict[str, Any]:
    """One run of ``name``; ``server`` is the bench's local server for a mode that names a backend."""
    overrides = job_overrides(path, name, out, args)
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
                        "wait_ms": m.get("wait_ms_per_event")})
    # what each producer's own requests carried in this very run, counted by the job's inference client
    sent_by_model = {model: counters.get("bytes_sent", 0) for model, counters in per_model.items()}
    input_mb = {m["label"]: sent_by_model.get(models[m["label"]], 0) / events / 1e6 for m in report["modules"]}
    return {"mode": name, "events": report["events"], "event_ms": event_ms,
            "job_cpu_ms": 1000.0 * report["cpu_s"] / events,
            "server_cpu_ms": None if server_cpu is None else 1000.0 * server_cpu / events, "events_per_s": report["events_per_s"],
            "modules": modules, "inference": report.get("inference"), "output": result.output,
            "models": {label: model or "" for label, model in models.items()}, "input_mb": input_mb}


def markdown(results: dict[str, Any]) -> str:
    modes = [r["mode"] for r in results["runs"]]
    head = "| module | algorithm | model | input MB/evt | " + " | ".join(
        f"{m} ms/evt | {m} % of event" for m in modes) + " |"
    lines = ["# sonic bench miniaod\n", f"Command: `{results.get('command', 'sonic bench miniaod')}`  ",
             f"Machine: {results['machine']}  ",
             f"Input: {results['input']} ({results['runs'][0]['events']} events), config {results['config']}, "
             f"{results['streams']} stream(s), {results['threads']} thread(s)  ",
             f"CPU pinning: {results.get('pinning', 'none')}\n", head,
             "|" + "---|" * (4 + 2 * len(modes))]
    for i, module in enumerate(results["runs"][0]["modules"]):
        cells = []
        for run in results["runs"]:
            m = run["modules"][i]
            cells += [f"{m['ms_per_event']:.1f}", f"{100 * m['fraction']:.1f} %"]
        label = module["label"]
        lines.append(f"| {label} | {algorithm(module['type'])} | {results['models'].get(label, '')} | "
                     f"{results['input_mb'].get(label, 0):.3f} | " + " | ".join(cells) + " |")
    lines.append("| sum of modules | | | | " + " | ".join(
        f"{sum(m['ms_per_event'] for m in r['modules']):.1f} | {100 * sum(m['fraction'] for m in r['modules']):.1f} %"
        for r in results["runs"]) + " |")
    lines.append("| **event** (wall) | | | | " + " | ".join(f"**{r['event_ms']:.1f}** | 100 %" for r in results["runs"])
                 + " |")
    lines.append("| CPU: job (+ server) ms/evt | | | | " + " | ".join(
        f"{r['job_cpu_ms']:.1f}" + ("" if r.get("server_cpu_ms") is None else
                                    f" + {r['server_cpu_ms']:.1f} = {r['job_cpu_ms'] + r['server_cpu_ms']:.1f}")
        + " |" for r in results["runs"]) + " |")
    lines.append("")
    lines.append(" · ".join(f"{r['mode']}: {r['events_per_s']:.1f} events/s" for r in results["runs"]))
    first = results["runs"][0]["mode"]
    if results.get("ratios"):
        lines.append("\nEvent time relative to " + first + ": " + " · ".join(
            f"{mode} **{ratio:.2f}×**" for mode, ratio in results["ratios"].items()))
        lines.append("\nCPU per event (job + its server) relative to " + first + ": " + " · ".join(
            f"{mode} {ratio:.2f}×" for mode, ratio in results["cpu_ratios"].items()) + " (on a shared machine the "
            "wall-time ratio depends on how the kernel shares the cores between the job and the server; the CPU "
            "ratio says what the service costs in capacity)")
    if results.get("repeat", 1) > 1:
        lines.append(f"\nEach mode's run of median event time of {results['repeat']} (interleaved); all runs, ms/event: "
                     + " · ".join(f"{r['mode']} {', '.join(f'{t:.1f}' for t in r['repeats_event_ms'])}"
                                  for r in results["runs"]))
    for mode, comparison in results.get("comparisons", {}).items():
        lines.append(f"\n{first} vs {mode} outputs: {comparison['summary']}")
    for mode, reason in results.get("unavailable", {}).items():
        lines.append(f"\n{mode}: not measured: {reason}")
    return "\n".join(lines) + "\n"


def local_server(args: argparse.Namespace, backend: str, cpus: list[int] | None = None) -> TritonServer:
    """A server of the configuration's model repositories whose ONNX models run on ``backend``."""
    config = cfgmod.load(args.config, list(args.param))
    folders = config.services.get("inference", {}).get("repository") or []
    folders = [folders] if isinstance(folders, str) else folders
    return TritonServer([resolve_repository(str(f)) for f in folders], backend=backend, cpus=cpus).start()


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = args.input or generated_input(out, "miniaod", args.events, args.seed)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise SystemExit(f"sonic bench miniaod: unknown mode(s) {unknown}; choose from {list(MODES)}")
    if args.server and any(MODES[m][1] for m in modes):
        raise SystemExit("sonic bench miniaod: --server is for mode 'sonic' (the sonic-python/sonic-native modes "
                         "start their own local server): use --modes direct,sonic")
    repeats: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    unavailable: dict[str, str] = {}
    servers: dict[str, TritonServer] = {}
    machine = machine_description()  # before the pinning narrows what this process sees
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
            for mode in modes:  # interleaved: a change in the machine's load hits every mode alike
                if mode not in unavailable:
                    server = servers.get(MODES[mode][1]) if MODES[mode][1] else None
                    repeats[mode].append(run_mode(args.config, path, mode, out, args, server))
    finally:
        for server in servers.values():
            server.stop()
    runs = []
    for mode in (m for m in modes if repeats[m]):
        ordered = sorted(repeats[mode], key=lambda r: r["event_ms"])
        run = dict(ordered[(len(ordered) - 1) // 2])
        run["repeats_event_ms"] = [r["event_ms"] for r in repeats[mode]]
        runs.append(run)
    results: dict[str, Any] = {
        "machine": machine, "command": bench_command("miniaod"), "pinning": cores.describe(),
        "input": os.path.basename(path), "config": args.config, "streams": args.streams, "threads": args.threads,
        "repeat": max(1, args.repeat), "runs": runs, "unavailable": unavailable,
    }
    first = runs[0] if runs else {}
    results.update(models=first.get("models", {}), input_mb=first.get("input_mb", {}))
    results["ratios"] = {r["mode"]: r["event_ms"] / first["event_ms"] for r in runs[1:]}
    total = {r["mode"]: r["job_cpu_ms"] + (r.get("server_cpu_ms") or 0.0) for r in runs}
    results["cpu_ratios"] = {r["mode"]: total[r["mode"]] / total[first["mode"]] for r in runs[1:]
                             if r.get("server_cpu_ms") is not None or MODES[r["mode"]][0] == "direct"} if runs else {}
    results["comparisons"] = {}
    for other in runs[1:]:
        comparison = compare_files(first["output"], other["output"])
        results["comparisons"][other["mode"]] = {"max_difference": comparison.worst, "equal": comparison.equal(),
                                                 "summary": comparison.summary().splitlines()[0]}
    if results["comparisons"]:  # all modes against the first, in one figure and one line
        worst = max(results["comparisons"].items(), key=lambda item: item[1]["max_difference"])
        results.update(max_difference=worst[1]["max_difference"],
                       outputs_equal=all(c["equal"] for c in results["comparisons"].values()),
                       comparison=f"{worst[0]}: {worst[1]['summary']}")
    (out / "miniaod.json").write_text(json.dumps(results, indent=2, default=str))
    text = markdown(results)
    (out / "miniaod.md").write_text(text)
    print(text)
    print(f"results in {os.path.abspath(out)}/miniaod.{{md,json}}")
    return 0
