"""ProtoDUNE EmTrkMichelId: the ML module's time per event, direct CPU / direct GPU / SONIC, side by side.

For each mode asked (``--modes``), on the same events:

* **ML module time per event**: the module's own work, with ``EmTrkMichelId``'s own request
  splitting and scores: the event's uint8 patches (made by the job's ``HitPatches``) cut into
  ``--batch-size`` requests, all sent at once, awaited together.
  The first event of each mode is a warm-up and is not counted; the median over events is reported.
* **Server throughput** (SONIC modes, ``--saturation``): several event loops in parallel against the
  one server; the GPU (or server) time per event is 1 / events per second.
* **Outputs** compared with direct CPU (max |Δ| of the four scores).
* **Whole job** (``--job-events``): ``sonic run``'s configuration on the file, to split the time per
  event into preprocessing (HitPatches), inference (EmTrkMichelId: acquire + wait + produce) and I/O
  with framework overhead (the rest of the wall time), for direct CPU and SONIC modes.

Modes: ``direct-cpu`` (onnxruntime in-process, ``--threads``), ``direct-gpu`` (the GPU repository's
torch model in-process, fp16), ``sonic-cpu`` (local Triton, onnxruntime backend), ``sonic-gpu`` (local
Triton serving ``data/models/protodune_gpu``: torch on KIND_GPU, patches in system shared memory).

From the measured times it derives, as the ProtoDUNE SONIC paper (Wang et al., 2021) did, the **CPU jobs one
GPU serves** (``(other reconstruction + preprocessing + SONIC module) / GPU time per event``; ``--other-reco-s``
defaults to 172 s: the paper's 68 jobs per T4 × 2.7 s of T4 time per event make 184 s per job event,
of which 12 s were its SONIC module) and the
**network-limited job count** (``link ÷ (bits per event ÷ job seconds)``, the paper's 100 Gb/s ÷
4.1 Gb × 25 s ≈ 600), for uint8 patches and for the float32 patches the paper sent.

Results go to ``--out``: ``protodune.md``, ``protodune.json``, ``protodune.png``.

Examples::

    sonic bench protodune --scale small --events 3 --modes direct-cpu,sonic-cpu        # here, CPU
    sonic bench protodune --scale full --events 6 --modes direct-cpu,direct-gpu,sonic-gpu --ort-threads 16
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ...framework import Process
from ...framework import config as cfgmod
from ...framework.futures import gather
from ...framework.inference import InferenceClient
from ...framework.inference import ModelRepository
from ...framework.inference.sonic import compute_ns
from ...framework.inference import InferenceConfig, make_client, resolve_repository
from ...framework.event import Event, EventView
from ...modules.protodune.emtrkmichelid import SCORES, requests, scores
from ._report import BenchReport, header

MODES = ("direct-cpu", "direct-gpu", "sonic-cpu", "sonic-gpu")
REPOSITORY = {"cpu": "data/models/protodune", "gpu": "data/models/protodune_gpu"}
MODEL = "emtrkmichelid"
PREPROCESSING = "patches"  # the HitPatches module's label in configs/protodune.yaml


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", help="ProtoDUNE ROOT file (default: generate --events events)")
    parser.add_argument("--scale", choices=("full", "small"), default="full", help="scale of generated events")
    parser.add_argument("--events", type=int, default=4, help="events to generate and time (the first is a warm-up)")
    parser.add_argument("--seed", type=int, default=21, help="generator seed (not one used in training)")
    parser.add_argument("--modes", default="direct-cpu,sonic-cpu", help=f"comma-separated, from {', '.join(MODES)}")
    parser.add_argument("--cpu-events", type=int, default=2, help="events timed for CPU modes (slow), warm-up included")
    parser.add_argument("--batch-size", type=int, default=1693, help="patches per request (the ProtoDUNE SONIC paper used 235 and 1693)")
    parser.add_argument("--ort-threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="onnxruntime threads (direct CPU, CPU server)")
    parser.add_argument("--torch-device", default="cuda:0",
                        help="device of direct-gpu (\"cpu\" runs that code path in float32 without a GPU, for dry runs)")
    parser.add_argument("--saturation", type=int, default=4, help="parallel event loops for server throughput (0: skip)")
    parser.add_argument("--job-events", type=int, default=2, help="events of the whole-job timing (0: skip)")
    parser.add_argument("--other-reco-s", type=float, default=172.0,
                        help="seconds per event of the rest of a reconstruction job (ProtoDUNE SONIC paper: 68 jobs per T4 "
                             "x 2.7 s of T4 per event = 184 s per job event, minus their 12 s module)")
    parser.add_argument("--job-seconds", type=float, default=25.0, help="job seconds per event in the network estimate")
    parser.add_argument("--link-gbps", type=float, default=100.0, help="network link of the server (Gb/s)")


# -- inputs -------------------------------------------------------------------------------------------
def read_patches(path: str, events: int) -> tuple[list[np.ndarray], list[float]]:
    """Each event's patches, and the preprocessing time of each: the job's own preprocessing module
    (``configs/protodune.yaml``'s ``patches``, with its parameters) on the job's own source, called
    event by event outside the scheduler so that the patches stay in memory for every mode."""
    process = Process(cfgmod.load("protodune", [f"source.files=[{path}]", f"source.max_events={events}"]))
    module = process.prototypes[PREPROCESSING]
    consumes = frozenset(module.consumes())
    optional = frozenset(key for key, tag in module.inputs().items() if tag.optional)
    (key,) = module.produces()
    patches, seconds = [], []
    module.begin_job()
    try:
        for chunk in process.source.chunks():
            for i in range(chunk.length):
                event = Event.alone(chunk, i)
                start = time.perf_counter()
                module.produce(EventView(event, module, consumes, optional))
                seconds.append(time.perf_counter() - start)
                patches.append(event.products[key])
    finally:
        module.end_job()
    return patches, seconds


def make_mode_client(mode: str, threads: int, torch_device: str = "cuda:0") -> InferenceClient:
    """The inference client of one benchmark mode (see the module docstring)."""
    where, device = mode.split("-")
    repository = resolve_repository(REPOSITORY[device])
    if where == "direct" and device == "gpu":
        from ._torch_client import TorchDirectClient

        return TorchDirectClient(ModelRepository([repository]), MODEL, device=torch_device,
                                 precision="float32" if torch_device == "cpu" else "float16")
    if where == "direct":
        return make_client(InferenceConfig(mode="direct", repository=[repository], workers=1,
                                           intra_op_threads=threads))
    return make_client(InferenceConfig(mode="sonic", repository=[repository], fallback=True,
                                       fallback_server={"device": device, "ort_threads": threads}))


def run_event(client: InferenceClient, patches: np.ndarray, batch_size: int) -> dict[str, np.ndarray]:
    """What EmTrkMichelId does for one event (its own requests and scores): every batch in flight
    together, awaited together."""
    batches = requests(patches, batch_size)
    return scores(gather([client.infer(MODEL, inputs) for inputs in batches]).result() if batches else [])


def saturation(client: InferenceClient, events: list[np.ndarray], batch_size: int, loops: int) -> float:
    """Events per second with ``loops`` event loops in parallel (each like one job's module)."""
    todo = [events[i % len(events)] for i in range(2 * loops)]
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                patches = todo.pop()
            run_event(client, patches, batch_size)

    threads = [threading.Thread(target=worker) for _ in range(loops)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 2 * loops / (time.perf_counter() - start)


def server_compute(stats: dict[str, Any]) -> dict[str, float]:
    """Server-side totals of the model (Triton statistics): requests, executions, compute and queue seconds."""
    total = {"requests": 0.0, "executions": 0.0, "compute_s": 0.0, "queue_s": 0.0}
    for models in (stats.get("servers") or {}).values():
        s = models.get(MODEL)
        if s:
            total["requests"] += s["requests"]
            total["executions"] += s["executions"]
            total["compute_s"] += compute_ns(s) / 1e9
            total["queue_s"] += s["queue_ns"] / 1e9
    return total


def measure_mode(mode: str, events: list[np.ndarray], args: argparse.Namespace,
                 reference: list[dict[str, np.ndarray]] | None) -> tuple[dict[str, Any], list[dict[str, np.ndarray]]]:
    """Times one mode (warm-up event first); returns its row and its outputs."""
    count = min(len(events), args.cpu_events if mode.endswith("cpu") else len(events))
    timed = events[1:count] or events[:1]  # with a single event, the warm-up event is timed again
    start = time.perf_counter()
    client = make_mode_client(mode, args.ort_threads, args.torch_device)
    setup = time.perf_counter() - start
    try:
        outputs = [run_event(client, events[0], args.batch_size)]  # warm-up
        times = []
        for patches in timed:
            start = time.perf_counter()
            outputs.append(run_event(client, patches, args.batch_size))
            times.append(time.perf_counter() - start)
        row: dict[str, Any] = {"mode": mode, "setup_s": setup, "events_timed": len(times),
                               "ml_s_per_event": statistics.median(times), "ml_s_all": times,
                               "hits_per_event": float(np.mean([len(p) for p in timed]))}
        if mode.startswith("sonic") and args.saturation > 0:
            row["throughput_events_per_s"] = saturation(client, events[:max(count, 1)], args.batch_size,
                                                        args.saturation)
        if mode.startswith("sonic"):
            row["server"] = server_compute(client.statistics())
    finally:
        client.close()
    if reference is not None:
        diffs = [max(float(np.max(np.abs(out[k] - ref[k]))) for k in SCORES)
                 for out, ref in zip(outputs, reference)]
        row["max_abs_diff_vs_direct_cpu"] = max(diffs)
    return row, outputs


def job_timing(mode: str, path: str, events: int, args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    """The whole configured job (``configs/protodune.yaml``) in ``mode``: time per event by part."""
    where, device = mode.split("-")
    overrides = [f"source.files=[{path}]", f"source.max_events={events}", f"output.file={out_dir / f'scores_{mode}.root'}",
                 f"emtrkmichel.batch_size={args.batch_size}", "options.progress=false",
                 f"services.inference.mode={where}", f"services.inference.repository=[{REPOSITORY[device]}]",
                 f"services.inference.intra_op_threads={args.ort_threads}", "services.inference.workers=1",
                 f"services.inference.fallback_server={{device: {device}, ort_threads: {args.ort_threads}}}"]
    result = Process(cfgmod.load("protodune", overrides)).run(progress=False)
    report = result.timing.report()
    modules = {m["label"]: m for m in report["modules"]}
    pre = modules[PREPROCESSING]["wall_ms_per_event"]
    ml = modules["emtrkmichel"]["wall_ms_per_event"] + modules["emtrkmichel"]["wait_ms_per_event"]
    other = sum(m["wall_ms_per_event"] for label, m in modules.items() if label not in (PREPROCESSING, "emtrkmichel"))
    wall = 1000 * report["wall_s"] / max(1, report["events"])
    return {"mode": mode, "events": report["events"], "wall_ms_per_event": wall, "preprocessing_ms": pre,
            "inference_ms": ml, "other_modules_ms": other, "io_and_framework_ms": wall - pre - ml - other}


# -- derived numbers ----------------------------------------------------------------------------------
def derived(rows: dict[str, dict[str, Any]], hits: float, preprocessing_s: float, args: argparse.Namespace) -> dict[str, Any]:
    bits_uint8 = hits * 48 * 48 * 8
    out: dict[str, Any] = {"hits_per_event": hits, "patch_gbit_per_event_uint8": bits_uint8 / 1e9,
                           "patch_gbit_per_event_float32": 4 * bits_uint8 / 1e9}
    for kind, bits in (("uint8", bits_uint8), ("float32", 4 * bits_uint8)):
        out[f"network_limited_jobs_{kind}"] = args.link_gbps * 1e9 / (bits / args.job_seconds)
    if "sonic-gpu" in rows and "direct-gpu" in rows:
        out["sonic_over_direct_gpu"] = rows["sonic-gpu"]["ml_s_per_event"] / rows["direct-gpu"]["ml_s_per_event"]
    for mode in ("sonic-gpu", "sonic-cpu"):
        row = rows.get(mode)
        if row and row.get("throughput_events_per_s"):
            gpu_s = 1.0 / row["throughput_events_per_s"]
            job_s = args.other_reco_s + preprocessing_s + row["ml_s_per_event"]
            out[f"{mode}_server_s_per_event"] = gpu_s
            out[f"{mode}_jobs_per_server"] = job_s / gpu_s
    return out


def _cell(value: float | None, spec: str) -> str:
    """A table cell: the formatted value, or "—" for what this mode does not measure (never ``nan``)."""
    return "—" if value is None or value != value else format(value, spec)


def job_line(job: dict[str, Any]) -> str:
    """One line of a whole-job timing, in ms per event, for the console."""
    return (f"job {job['mode']}: {job['events']} events, {job['wall_ms_per_event']:.0f} ms/event = preprocessing "
            f"{job['preprocessing_ms']:.0f} + inference {job['inference_ms']:.0f} + other modules "
            f"{job['other_modules_ms']:.0f} + I/O and framework {job['io_and_framework_ms']:.0f}")


def markdown(report: dict[str, Any]) -> str:
    args = report["arguments"]
    lines = [*header("sonic bench protodune: EmTrkMichelId", report,
                     f"Events: {report['events']} ({report['scale']} scale, {report['derived']['hits_per_event']:.0f} "
                     f"hits = patches per event), batch size {args['batch_size']}; preprocessing (patches) "
                     f"{1000 * report['preprocessing_s_per_event']:.0f} ms/event (median, one core)."),
             "| mode | ML module s/event (median) | events timed | max abs diff vs direct CPU | server events/s | "
             "server compute s (total) |", "| --- | --- | --- | --- | --- | --- |"]
    for row in report["modes"]:
        server = row.get("server", {})
        lines.append(f"| {row['mode']} | {row['ml_s_per_event']:.3f} | {row['events_timed']} | "
                     f"{_cell(row.get('max_abs_diff_vs_direct_cpu'), '.2e')} | "
                     f"{_cell(row.get('throughput_events_per_s'), '.2f')} | {_cell(server.get('compute_s'), '.2f')} |")
    if any("throughput_events_per_s" not in row for row in report["modes"]):
        lines += ["", "— : not measured (direct modes have no server; the reference has no difference to itself)."]
    if report["jobs"]:
        lines += ["", "Whole job (`configs/protodune.yaml`), ms per event:", "",
                  "| mode | events | wall | preprocessing | inference (EmTrkMichelId) | other modules | I/O + framework |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for job in report["jobs"]:
            lines.append(f"| {job['mode']} | {job['events']} | {job['wall_ms_per_event']:.0f} | "
                         f"{job['preprocessing_ms']:.0f} | {job['inference_ms']:.0f} | {job['other_modules_ms']:.0f} | "
                         f"{job['io_and_framework_ms']:.0f} |")
    for what, error in report["failures"].items():
        lines.append(f"\n**{what} failed**: {error[:500]}")
    d = report["derived"]
    lines += ["", "Derived:", "",
              f"- patches per event: {d['patch_gbit_per_event_uint8']:.2f} Gb as uint8 "
              f"({d['patch_gbit_per_event_float32']:.2f} Gb as float32; the ProtoDUNE SONIC paper sent 4.1 Gb)",
              f"- network-limited jobs on {args['link_gbps']:.0f} Gb/s at {args['job_seconds']:.0f} s/event: "
              f"{d['network_limited_jobs_uint8']:.0f} with uint8 patches, {d['network_limited_jobs_float32']:.0f} "
              f"with float32 (paper: ~600)"]
    if "sonic_over_direct_gpu" in d:
        lines.append(f"- SONIC GPU / direct GPU ML module time: {d['sonic_over_direct_gpu']:.2f}")
    for mode in ("sonic-gpu", "sonic-cpu"):
        if f"{mode}_jobs_per_server" in d:
            lines.append(f"- {mode}: server time {d[f'{mode}_server_s_per_event']:.3f} s/event at saturation → "
                         f"{d[f'{mode}_jobs_per_server']:.0f} jobs per server (jobs of {args['other_reco_s']:.0f} s "
                         f"other reconstruction + preprocessing + SONIC module; paper: 68 per T4)")
    return "\n".join(lines) + "\n"


def needs_log_axis(values: list[float]) -> bool:
    """Whether bars of ``values`` need a log axis: only when they span more than a factor 20 (CPU against
    GPU modes), where a linear axis would flatten the fast ones. Otherwise the axis is linear from zero,
    so bar heights compare as the times do (on a log axis, 14 % looks like a factor)."""
    return bool(values) and min(values) > 0 and max(values) / min(values) > 20


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [row["mode"] for row in report["modes"]]
    values = [row["ml_s_per_event"] for row in report["modes"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(modes, values, color=["#4477aa", "#66ccee", "#228833", "#ccbb44"][:len(modes)])
    if needs_log_axis(values):
        ax.set_yscale("log")
        ax.set_ylabel("ML module time per event (s, log scale)")
    else:
        ax.set_ylim(0, 1.15 * max(values, default=1.0))
        ax.set_ylabel("ML module time per event (s)")
    ax.set_title(f"EmTrkMichelId, {report['derived']['hits_per_event']:.0f} patches/event")
    for x, v in enumerate(values):
        ax.text(x, v, f"{v:.3g}", ha="center", va="bottom")
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise SystemExit(f"unknown mode(s) {unknown}; choose from {list(MODES)}")
    bench = BenchReport.start("protodune", args.out)
    out = bench.out
    path = args.input
    generation_s = None
    if path is None:
        from ...data.protodune.generate import generate

        path = str(out / f"protodune_{args.scale}.root")
        start = time.perf_counter()
        generate(path, args.events, args.scale, seed=args.seed)
        generation_s = time.perf_counter() - start
        print(f"generated {args.events} {args.scale} events in {generation_s:.1f} s", flush=True)
    events, pre_times = read_patches(path, args.events)
    preprocessing_s = statistics.median(pre_times[1:] or pre_times)
    print(f"{len(events)} events, {np.mean([len(e) for e in events]):.0f} patches/event, "
          f"preprocessing {1000 * preprocessing_s:.0f} ms/event", flush=True)
    rows: dict[str, dict[str, Any]] = {}
    reference = None
    failures: dict[str, str] = {}
    for mode in sorted(modes, key=lambda m: m != "direct-cpu"):  # direct CPU first: the reference
        try:
            row, outputs = measure_mode(mode, events, args, reference)
        except Exception as err:  # noqa: BLE001 - one mode failing (no GPU, no server) keeps the others
            failures[mode] = f"{type(err).__name__}: {err}"
            print(f"{mode}: FAILED {failures[mode]}", flush=True)
            continue
        if mode == "direct-cpu":
            reference = outputs
        rows[mode] = row
        print(f"{mode}: {row['ml_s_per_event']:.3f} s/event (ML module, median of {row['events_timed']})", flush=True)
    jobs = []
    for mode in modes if args.job_events > 0 else []:
        if mode == "direct-gpu" or mode in failures:
            continue
        try:
            jobs.append(job_timing(mode, path, args.job_events, args, out))
        except Exception as err:  # noqa: BLE001
            failures[f"job {mode}"] = f"{type(err).__name__}: {err}"
            print(f"job {mode}: FAILED {failures[f'job {mode}']}", flush=True)
            continue
        print(job_line(jobs[-1]), flush=True)
    hits = float(np.mean([len(e) for e in events]))
    report = {**bench.fields(), "arguments": {k: v for k, v in vars(args).items() if not callable(v)},
              "scale": args.scale,
              "events": len(events), "generation_s": generation_s, "preprocessing_s_per_event": preprocessing_s,
              "modes": [rows[m] for m in modes if m in rows], "jobs": jobs, "failures": failures,
              "derived": derived(rows, hits, preprocessing_s, args)}
    bench.write(markdown(report), report, {"protodune.png": lambda figure: plot(report, figure)})
    return 1 if failures else 0
