"""ProtoDUNE EmTrkMichelId on one GPU, in-process and served: where the time goes, and events/s at saturation.

The same network code (``data/models/protodune_gpu/emtrkmichelid/1/model.py``) runs two ways on the
same events:

* **direct**: in the job's process (the code path of ``sonic bench protodune --modes direct-gpu``);
* **server**: in a local Triton server (python-based model, ``KIND_GPU`` instances), driven by the
  project's SONIC client with the patches in system shared memory, each event's patches cut into
  ``--batch-size`` requests all in flight together, as ``EmTrkMichelId`` sends them.

Measured, in one run:

1. **Stages of one event** (CUDA events, direct, one process): host→device (into the reused
   page-locked buffer, then the copy), widening uint8, convolution(+ReLU), first Dense layer, the rest
   of the network, device→host.
2. **Saturation, direct**: N separate processes, each running events back to back (``--processes``);
   events/s of them all and GPU busy % (``nvidia-smi``).
3. **Saturation, server**: N separate client processes against one server (``--clients``), for each
   server setting of ``--servers`` (instances and staging); events/s, GPU busy %, and per event the
   server's own accounting (Triton statistics: queue, input copy into the python stub, execution,
   output) and rows per execution (what dynamic batching merged).
4. **Stages inside the server** (a separate, shorter pass with ``SONIC_STAGE_LOG``: each execution logs
   reading its inputs, host→device, the forward pass, device→host and responses; this pass
   synchronises the device between stages, so its events/s are not quoted). The python backend's
   own overhead is Triton's execution time less what the model itself accounts for.
5. **Scores** of the first event, direct GPU and server, against onnxruntime on the CPU.

``--baseline`` adds the first GPU entry's code path (channel-first convolution with a separate ReLU,
pageable host memory, one request per execution) as its own rows, for comparison.

Outputs in ``--out``: ``gpu.md`` (tables), ``gpu.json``, ``gpu.png`` (where the time goes, direct vs
server) and ``gpu_timeline.png`` (server executions per instance over time, and one direct event).

Examples::

    sonic bench gpu --events 3 --processes 1 2 4 --clients 8 16 --servers 2:pinned 4:pinned --baseline
    sonic bench gpu --device cpu --scale small --events 2 --processes 1 --clients 2 --seconds 3   # dry run, no GPU
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ._report import BenchReport, header
from ...framework.paths import MODELS

MODEL = "emtrkmichelid"
REPOSITORY = MODELS / "protodune_gpu"
#: the first GPU entry's code path, selected through the model's parameters alone
BASELINE = {"layout": "nchw", "fuse": "false", "staging": "pageable", "max_batch": 1693}
STAGES = ("h2d", "widen", "convolve", "dense1", "heads", "d2h")
#: max |Δ| of any score against onnxruntime on the CPU: float16 on a GPU (README), float32 on a CPU
TOLERANCE = {"cuda": 5e-3, "cpu": 1e-4}
SERVER_STAGES = ("inputs_s", "h2d_s", "forward_s", "d2h_and_responses_s")
NETWORK_KEYS = ("layout", "chunk", "fuse", "sync")  # the entry's parameters that direct and served share


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", help="ProtoDUNE ROOT file (default: generate --events events)")
    parser.add_argument("--scale", choices=("full", "small"), default="full", help="scale of generated events")
    parser.add_argument("--events", type=int, default=3, help="events to generate and cycle through")
    parser.add_argument("--seed", type=int, default=21, help="generator seed (not one used in training)")
    parser.add_argument("--batch-size", type=int, default=1693, help="patches per request the clients send")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4], help="direct processes per point")
    parser.add_argument("--clients", type=int, nargs="+", default=[8], help="client processes per server point")
    parser.add_argument("--servers", nargs="+", default=["16:registered"], metavar="INSTANCES:STAGING",
                        help="server settings to measure: model instances and how inputs reach the device "
                             "(registered: the stub's pool page-locked in place; pageable; pinned: a copy into "
                             "a page-locked buffer)")
    parser.add_argument("--max-batch", type=int, default=16384,
                        help="the served model's max_batch_size: how many patches dynamic batching may merge")
    parser.add_argument("--chunk", type=int, help="patches per forward pass, direct and served (default: the entry's)")
    parser.add_argument("--sync", choices=("blocking", "spin"),
                        help="how a host thread waits for the GPU, direct and served (default: the entry's)")
    parser.add_argument("--python-shm-mb", type=int, default=256,
                        help="the python stubs' shared-memory pool per instance (Triton backend-config)")
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per saturation point")
    parser.add_argument("--repeat", type=int, default=1,
                        help="measure each saturation point this many times, with fresh processes (and a fresh "
                             "server); the summary takes the median")
    parser.add_argument("--baseline", action="store_true", help="also measure the first GPU entry's code path")
    parser.add_argument("--device", default="cuda:0", help="torch device; \"cpu\" dry-runs every step without a GPU")
    parser.add_argument("--no-reference", action="store_true", help="skip the onnxruntime CPU score check")


# -- events -----------------------------------------------------------------------------------------------
def event_patches(args: argparse.Namespace, out: Path) -> list[np.ndarray]:
    """Each event's uint8 patches, made by the job's own preprocessing (see ``sonic bench protodune``)."""
    from .protodune import read_patches

    path = args.input
    if path is None:
        from ...data.protodune.generate import generate

        path = str(out / f"protodune_{args.scale}.root")  # out: the run's temporary folder
        generate(path, args.events, args.scale, seed=args.seed)
    patches, _ = read_patches(path, args.events)
    return patches


def load_network_module() -> Any:
    from ._torch_client import load_model_file

    return load_model_file(REPOSITORY / MODEL / "1" / "model.py")


def build(module: Any, device: str, settings: dict[str, Any]) -> tuple[Any, Any]:
    """The network the shipped entry's parameters describe, ``settings`` overriding them (so that
    direct and served run the same network), and its host staging on ``device`` (None: pageable;
    in-process the default is a page-locked buffer of its own)."""
    import torch

    from ...framework.inference import ModelRepository

    dev = torch.device(device)
    config = ModelRepository([REPOSITORY]).get(MODEL).config_dict
    net = module.network_from_config(REPOSITORY / MODEL / "1" / "model.onnx", dev, config,
                                     **{k: v for k, v in settings.items() if k in NETWORK_KEYS})
    staging = (module.PinnedStaging(dev) if dev.type == "cuda" and settings.get("staging", "pinned") == "pinned"
               else None)
    return net, staging


def host_tensor(patches: np.ndarray) -> Any:
    """The patches as a CPU tensor without a copy. Arrays read from ROOT files are read-only, which
    torch warns about; the tensor is only ever read."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(patches)


def run_direct_event(net: Any, staging: Any, patches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    host = host_tensor(patches)
    codes = staging.to_device([host]) if staging is not None else host.to(net.conv_w.device)
    em, michel = net(codes)
    return em.cpu().numpy(), michel.cpu().numpy()


# -- 1. stages of one direct event ----------------------------------------------------------------------
def direct_stages(net: Any, staging: Any, patches: np.ndarray, repeats: int = 3) -> dict[str, float]:
    """Milliseconds per event in each stage (median of ``repeats``), timed with CUDA events (wall
    clock on the CPU) around each stage of each chunk; also the start/end of each stage of the last
    repeat, for the timeline."""
    import torch

    cuda = net.conv_w.device.type == "cuda"

    class Clock:
        def __init__(self) -> None:
            self.marks: list[Any] = []

        def mark(self) -> None:
            if cuda:
                event = torch.cuda.Event(enable_timing=True)
                event.record()
                self.marks.append(event)
            else:
                self.marks.append(time.perf_counter())

        def spans(self) -> list[float]:
            if cuda:
                torch.cuda.synchronize()
                return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
            return [1000 * (b - a) for a, b in zip(self.marks, self.marks[1:])]

    runs: list[dict[str, float]] = []
    timeline: list[tuple[str, float, float]] = []
    for _ in range(repeats + 1):  # the first is a warm-up
        clock = Clock()
        names: list[str] = []
        with torch.inference_mode():
            clock.mark()
            host = host_tensor(patches)
            codes = staging.to_device([host]) if staging is not None else host.to(net.conv_w.device)
            clock.mark()
            names.append("h2d")
            outputs = []
            step = net.chunk or len(codes)
            for i in range(0, len(codes), step):
                x = net.widen(codes[i:i + step])
                clock.mark()
                x = net.convolve(x)
                clock.mark()
                x = net.dense1(x)
                clock.mark()
                outputs.append(net.heads(x))
                clock.mark()
                names += ["widen", "convolve", "dense1", "heads"]
            em = torch.cat([o[0] for o in outputs]).cpu()
            torch.cat([o[1] for o in outputs]).cpu()
            clock.mark()
            names.append("d2h")
        spans = clock.spans()
        total = dict.fromkeys(STAGES, 0.0)
        t = 0.0
        timeline = []
        for name, span in zip(names, spans):
            total[name] += span
            timeline.append((name, t, span))
            t += span
        runs.append(total)
        del em
    result = {f"{k}_ms": statistics.median(r[k] for r in runs[1:]) for k in STAGES}
    result["total_ms"] = sum(result[f"{k}_ms"] for k in STAGES)
    result["timeline"] = timeline
    return result


# -- 2./3. saturation with separate processes -------------------------------------------------------------
def _spawn(role: str, spec: dict[str, Any], count: int, workdir: Path) -> list[subprocess.Popen]:
    procs = []
    for i in range(count):
        (workdir / f"{role}{i}.json").unlink(missing_ok=True)
        procs.append(subprocess.Popen([sys.executable, "-m", __name__, role,
                                       json.dumps({**spec, "result": str(workdir / f"{role}{i}.json")})]))
    return procs


def _collect(procs: list[subprocess.Popen], role: str, workdir: Path, timeout: float) -> list[dict[str, Any]]:
    for p in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    results = []
    for i in range(len(procs)):
        path = workdir / f"{role}{i}.json"
        if path.exists():
            results.append(json.loads(path.read_text()))
    return results


def saturate(role: str, spec: dict[str, Any], count: int, seconds: float, workdir: Path,
             on_start: Any = None) -> dict[str, Any]:
    """``count`` processes of ``role``, started together once all are ready; events/s of them all."""
    from .scale import CpuSampler, GpuSampler

    start_at = time.time() + 14 + 0.3 * count  # time for every process to import, connect and warm up
    procs = _spawn(role, {**spec, "start_at": start_at, "seconds": seconds}, count, workdir)
    while time.time() < start_at:
        time.sleep(0.05)
    before = on_start() if on_start else None
    with GpuSampler(0.25) as gpu, CpuSampler([], 0.25) as cpu:
        results = _collect(procs, role, workdir, timeout=seconds + 120)
    after = on_start() if on_start else None
    # the host's busy cores over the measured stretch: a GPU left waiting on a saturated host shows here
    cpu_window = cpu.over(start_at, start_at + seconds)
    rates = [r["events"] / r["seconds"] for r in results]
    latencies = [x for r in results for x in r["latencies"]]
    return {"processes": count, "finished": len(results), "events_per_s": float(sum(rates)),
            "event_latency_median_s": float(np.median(latencies)) if latencies else None,
            "gpu_busy_percent": float(np.mean(gpu.samples[1:-1] or gpu.samples)) if gpu.samples else None,
            "cpu_busy_cores": cpu_window[1] if cpu_window else None,
            "gpu_memory_peak_mib": max(gpu.memory_mib) if gpu.memory_mib else None,
            "events": int(sum(r["events"] for r in results)), "stats": (before, after)}


def _loop(run_event: Any, patches: list[np.ndarray], spec: dict[str, Any]) -> None:
    """A worker's measured loop: warm-up, wait for the common start, events back to back."""
    for event in patches[:2]:
        run_event(event)
    while time.time() < spec["start_at"]:
        time.sleep(0.01)
    latencies, n, start = [], 0, time.perf_counter()
    while time.perf_counter() - start < spec["seconds"]:
        t = time.perf_counter()
        run_event(patches[n % len(patches)])
        latencies.append(time.perf_counter() - t)
        n += 1
    Path(spec["result"]).write_text(json.dumps({"events": n, "seconds": time.perf_counter() - start,
                                                "latencies": latencies}))


def _load_events(spec: dict[str, Any]) -> list[np.ndarray]:
    return [np.load(path, mmap_mode="r")[:] for path in spec["events"]]


def direct_worker(spec: dict[str, Any]) -> None:
    net, staging = build(load_network_module(), spec["device"], spec["settings"])
    _loop(lambda p: run_direct_event(net, staging, p), _load_events(spec), spec)


def client_worker(spec: dict[str, Any]) -> None:
    from ...framework.inference import InferenceConfig, make_client
    from .protodune import run_event

    client = make_client(InferenceConfig(mode="sonic", repository=[spec["repository"]], servers=[spec["url"]],
                                         fallback=False, shared_memory="on", timeout_s=300))
    try:
        _loop(lambda p: run_event(client, p, spec["batch_size"]), _load_events(spec), spec)
    finally:
        client.close()


# -- the server ------------------------------------------------------------------------------------------
def server_repository(workdir: Path, instances: int, max_batch: int, parameters: dict[str, str], kind: str) -> Path:
    """A repository serving the GPU entry's own files with ``instances``, ``max_batch`` and
    ``parameters`` set in its config."""
    from tritonclient.grpc import model_config_pb2 as mc

    from ...framework.inference import ModelRepository
    from ...framework.inference.serving import write_entry

    info = ModelRepository([REPOSITORY]).get(MODEL)
    root = workdir / f"repository_{instances}_{max_batch}_{'_'.join(parameters.values())}"
    shutil.rmtree(root, ignore_errors=True)
    config = mc.ModelConfig()
    config.CopyFrom(info.config)
    config.max_batch_size = max_batch
    del config.instance_group[:]
    config.instance_group.add(count=instances, kind=getattr(mc.ModelInstanceGroup, kind))
    for key, value in parameters.items():
        config.parameters[key].string_value = str(value)
    write_entry(info, root / MODEL, config)
    return root


def statistics_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """Requests, executions and ns of each phase between two Triton statistics snapshots of the model."""
    def flat(stats: dict[str, Any]) -> dict[str, float]:
        model = stats["model_stats"][0]
        inference = model["inference_stats"]
        out = {"executions": float(model.get("execution_count", 0)),
               "requests": float(inference["success"].get("count", 0))}
        for key in ("queue", "compute_input", "compute_infer", "compute_output"):
            out[f"{key}_ns"] = float(inference[key].get("ns", 0))
        return out

    a, b = flat(before), flat(after)
    return {k: b[k] - a[k] for k in a}


def measure_server(label: str, settings: dict[str, Any], args: argparse.Namespace, events: list[Path],
                   workdir: Path, reference: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, Any]:
    """Saturation points and the stage-log pass of one server setting; with ``reference`` (onnxruntime's
    scores of the first event) also the max |Δ| of the served scores of that event."""
    import tritonclient.grpc as grpcclient

    from ...framework.inference.serving import TritonServer

    gpu = args.device.startswith("cuda")
    parameters = {k: str(settings[k]) for k in (*NETWORK_KEYS, "staging") if k in settings}
    repo = server_repository(workdir, settings["instances"], settings["max_batch"], parameters,
                             "KIND_GPU" if gpu else "KIND_CPU")
    row: dict[str, Any] = {"label": label, **settings, "points": []}
    # a fresh server for each repeat: how its instances start (memory, kernels chosen) varies run to run
    for repeat, stage_log in [(r, False) for r in range(args.repeat)] + [(args.repeat, True)]:
        log = workdir / f"stages_{label}.jsonl"
        log.unlink(missing_ok=True)
        server = TritonServer([repo], device="gpu" if gpu else "cpu", python_shm_mb=args.python_shm_mb,
                              env={"SONIC_STAGE_LOG": str(log)} if stage_log else {}).start()
        try:
            stats = grpcclient.InferenceServerClient(server.grpc_url)

            def snapshot() -> dict[str, Any]:
                return stats.get_inference_statistics(MODEL, as_json=True)

            spec = {"repository": str(repo), "url": server.grpc_url, "batch_size": args.batch_size,
                    "events": [str(p) for p in events]}
            if reference is not None and not stage_log and repeat == 0:
                row["score_max_abs_diff"] = served_score_difference(server.grpc_url, repo, np.load(events[0]),
                                                                    args.batch_size, reference)
            for clients in (args.clients if not stage_log else args.clients[:1]):
                point = saturate("client", spec, clients, args.seconds if not stage_log else min(args.seconds, 5),
                                 workdir, on_start=snapshot)
                before, after = point.pop("stats")
                delta = statistics_delta(before, after)
                requests = max(delta["requests"], 1)
                # Triton books an execution's input, execution and output times to each request it
                # held: per request they are the execution's, and an event takes executions/events of them
                executions_per_event = delta["executions"] / max(point["events"], 1)
                point.update({
                    "requests": delta["requests"], "executions": delta["executions"],
                    "rows_per_execution": args.batch_size * delta["requests"] / max(delta["executions"], 1),
                    "queue_ms_per_request": delta["queue_ns"] / 1e6 / requests,
                    **{f"{key}_ms_per_event": delta[f"{key}_ns"] / 1e6 / requests * executions_per_event
                       for key in ("compute_input", "compute_infer", "compute_output")}})
                if stage_log:
                    row["stage_pass"] = point
                else:
                    row["points"].append(point)
                print(f"server {label}{' (stage log)' if stage_log else ''}: {clients} clients, "
                      f"{point['events_per_s']:.1f} events/s, GPU {point['gpu_busy_percent'] or 0:.0f} %, "
                      f"{point['rows_per_execution']:.0f} rows/execution", flush=True)
        finally:
            server.stop()
        if stage_log and log.exists():
            row["stages"] = server_stages(log, row["stage_pass"])
    return row


def server_stages(log: Path, point: dict[str, Any]) -> dict[str, Any]:
    """Per event: each stage the model logged, and the python backend's overhead (Triton's execution
    time less the model's own)."""
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    if not lines:
        return {}
    rows = sum(line["rows"] for line in lines)
    patches_per_event = point["rows_per_execution"] * point["executions"] / max(point["events"], 1) \
        if point["events"] else rows
    scale = 1000 * patches_per_event / rows  # seconds summed over the logged executions → ms per event
    out = {f"{key[:-2]}_ms_per_event": sum(line[key] for line in lines) * scale for key in SERVER_STAGES}
    model = sum(out.values())
    out["python_backend_overhead_ms_per_event"] = max(point["compute_infer_ms_per_event"] - model, 0.0)
    out["timeline"] = [{"pid": line["pid"], "start": line["start"], **{k: line[k] for k in SERVER_STAGES}}
                       for line in lines]
    return out


# -- scores ---------------------------------------------------------------------------------------------
def reference_scores(patches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(REPOSITORY / MODEL / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    em, michel = session.run(None, {"patches": patches})
    return em, michel


# -- report ---------------------------------------------------------------------------------------------
def markdown(report: dict[str, Any]) -> str:
    lines = header("sonic bench gpu: ProtoDUNE EmTrkMichelId on one GPU, direct vs served", report,
                   f"Events: {report['events']} ({report['patches_per_event']:.0f} patches per event, uint8, "
                   f"{report['mb_per_event']:.0f} MB); client requests of {report['arguments']['batch_size']} patches.")
    lines += ["## Stages of one event, direct (ms, CUDA events)", "",
              "| code path | " + " | ".join(STAGES) + " | total |", "|---" * (len(STAGES) + 2) + "|"]
    for name, stages in report["direct_stages"].items():
        lines.append(f"| {name} | " + " | ".join(f"{stages[f'{k}_ms']:.1f}" for k in STAGES)
                     + f" | {stages['total_ms']:.1f} |")
    lines += ["", "## Saturation (events/s of all processes together)", "",
              "| setting | processes | events/s | GPU busy % | GPU memory (GiB, peak) | host cores busy | "
              "event latency (s, median) | rows per execution | queue (ms per request) | input copy | execution | "
              "output (ms per event, server) |", "|---" * 12 + "|"]

    def cell(value: Any, spec: str) -> str:
        return "—" if value is None else format(value, spec)

    def gib(mib: float | None) -> float | None:
        return None if mib is None else mib / 1024

    for name, points in report["direct"].items():
        for p in points:
            lines.append(f"| direct {name} | {p['processes']} | {p['events_per_s']:.1f} | "
                         f"{cell(p['gpu_busy_percent'], '.0f')} | {cell(gib(p.get('gpu_memory_peak_mib')), '.1f')} | "
                         f"{cell(p.get('cpu_busy_cores'), '.1f')} | "
                         f"{cell(p['event_latency_median_s'], '.3f')} | — | — | — | — | — |")
    for row in report["servers"]:
        for p in row["points"]:
            lines.append(f"| server {row['label']} | {p['processes']} clients | {p['events_per_s']:.1f} | "
                         f"{cell(p['gpu_busy_percent'], '.0f')} | {cell(gib(p.get('gpu_memory_peak_mib')), '.1f')} | "
                         f"{cell(p.get('cpu_busy_cores'), '.1f')} | "
                         f"{cell(p['event_latency_median_s'], '.3f')} | {p['rows_per_execution']:.0f} | {p['queue_ms_per_request']:.0f} | "
                         f"{p['compute_input_ms_per_event']:.1f} | {p['compute_infer_ms_per_event']:.1f} | "
                         f"{p['compute_output_ms_per_event']:.1f} |")
    staged = [row for row in report["servers"] if row.get("stages")]
    if staged:
        lines += ["", "## Inside the server, per event (ms; stage-log pass, device synchronised between stages)", "",
                  "| setting | Triton input copy | stub reads inputs | host→device | forward | device→host + responses "
                  "| python backend overhead |", "|---|---|---|---|---|---|---|"]
        for row in staged:
            s, p = row["stages"], row["stage_pass"]
            lines.append(f"| {row['label']} | {p['compute_input_ms_per_event']:.1f} | {s['inputs_ms_per_event']:.1f} | "
                         f"{s['h2d_ms_per_event']:.1f} | {s['forward_ms_per_event']:.1f} | "
                         f"{s['d2h_and_responses_ms_per_event']:.1f} | {s['python_backend_overhead_ms_per_event']:.1f} |")
    summary = report.get("summary", {})
    if summary:
        lines += ["", "## Summary", ""] + [f"- {k.replace('_', ' ')}: {v:.3g}" if isinstance(v, float) else
                                           f"- {k.replace('_', ' ')}: {v}" for k, v in summary.items()]
    if report["scores"]:
        lines += ["", "Scores of the first event against onnxruntime on the CPU (max |Δ| over the four scores): "
                  + ", ".join(f"{k} {v:.2e}" for k, v in report["scores"].items())]
    for what, error in report["failures"].items():
        lines.append(f"\n**{what} failed**: {error[:500]}")
    return "\n".join(lines) + "\n"


#: one colour per stage, the same in both figures
COLOURS = {"h2d": "#4477aa", "widen": "#66ccee", "convolve": "#228833", "dense1": "#ccbb44", "heads": "#ee6677",
           "d2h": "#aa3377", "inputs": "#bbbbbb", "forward": "#228833", "d2h_and_responses": "#aa3377",
           "overhead": "#777777", "input copy": "#dddddd"}


def plot(report: dict[str, Any], path: Path) -> None:
    """``gpu.png``: one event's stages, direct against served at saturation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = COLOURS
    fig, ax = plt.subplots(figsize=(8, 4))
    bars: list[tuple[str, list[tuple[str, float]]]] = []
    for name, stages in report["direct_stages"].items():
        bars.append((f"direct\n{name}", [(k, stages[f"{k}_ms"]) for k in STAGES]))
    for row in report["servers"]:
        if row.get("stages"):
            # instance time per event over the instances working at once: the wall time an event
            # holds the whole server, comparable with one direct event's
            s, p, n = row["stages"], row["stage_pass"], row["instances"]
            bars.append((f"server\n{row['label']}", [(k, v / n) for k, v in (
                ("input copy", p["compute_input_ms_per_event"]), ("inputs", s["inputs_ms_per_event"]),
                ("h2d", s["h2d_ms_per_event"]), ("forward", s["forward_ms_per_event"]),
                ("d2h_and_responses", s["d2h_and_responses_ms_per_event"]),
                ("overhead", s["python_backend_overhead_ms_per_event"]))]))
    seen = set()
    for x, (label, parts) in enumerate(bars):
        bottom = 0.0
        for name, value in parts:
            ax.bar(x, value, bottom=bottom, color=colours[name], label=None if name in seen else name)
            seen.add(name)
            bottom += value
        ax.text(x, bottom, f"{bottom:.0f}", ha="center", va="bottom")
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
    ax.set_ylabel("ms per event")
    ax.set_title("One event: direct, one process alone (CUDA events) vs served at saturation\n"
                 "(instance time per event ÷ instances, which share the GPU)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never over them
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)


def plot_timeline(report: dict[str, Any], path: Path) -> None:
    """``gpu_timeline.png``: the server's executions over one second beside one direct event's stages."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = COLOURS
    fig, axes = plt.subplots(2, 1, figsize=(9, 5), gridspec_kw={"height_ratios": [3, 1]})
    staged = [row for row in report["servers"] if row.get("stages")]
    if staged:
        row = staged[-1]
        lines = row["stages"]["timeline"]
        starts = sorted(line["start"] for line in lines)  # the middle second: clients' warm-up is before it
        t0 = starts[len(starts) // 2] - 0.5 if starts[-1] - starts[0] > 1.0 else starts[0]
        window = [line for line in lines if 0.0 <= line["start"] - t0 < 1.0]
        pids = sorted({line["pid"] for line in window})
        for line in window:
            t = line["start"] - t0
            for key in SERVER_STAGES:
                name = key[:-2]
                axes[0].barh(pids.index(line["pid"]), 1000 * line[key], left=1000 * t, color=colours[name], height=0.6)
                t += line[key]
        axes[0].set_yticks(range(len(pids)), [f"instance {i}" for i in range(len(pids))])
        axes[0].set_title(f"server {row['label']}: executions in the middle second of the stage-log pass")
    axes[0].set_xlabel("ms")
    direct = next(iter(report["direct_stages"].values()), None)
    if direct:
        for name, start, span in direct["timeline"]:
            axes[1].barh(0, span, left=start, color=colours[name], height=0.6)
        axes[1].set_yticks([0], ["direct, 1 event"])
        axes[1].set_xlabel("ms")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in ("inputs", "h2d", "widen", "convolve", "dense1",
                                                                        "heads", "forward", "d2h")]
    axes[0].legend(handles, ["stub reads inputs", "host→device", "widen", "convolve", "dense1", "heads",
                             "forward", "device→host"], fontsize=7, ncol=4, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)


# -- the benchmark ----------------------------------------------------------------------------------------
def best_median(points: list[dict[str, Any]]) -> float:
    """The best over process counts of the median events/s of each count's repeats."""
    by_count: dict[int, list[float]] = {}
    for point in points:
        by_count.setdefault(point["processes"], []).append(point["events_per_s"])
    return max((float(np.median(rates)) for rates in by_count.values()), default=0.0)


def network_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The entry parameters ``--chunk`` / ``--sync`` override, for direct and served alike."""
    return {k: v for k, v in (("chunk", args.chunk), ("sync", args.sync)) if v is not None}


def parse_servers(items: list[str], max_batch: int, overrides: dict[str, Any] | None = None
                  ) -> dict[str, dict[str, Any]]:
    settings = {}
    for item in items:
        instances, _, staging = item.partition(":")
        if not instances.isdigit() or int(instances) < 1 or staging not in ("registered", "pinned", "pageable"):
            raise SystemExit(f"--servers {item!r}: expected INSTANCES:STAGING, STAGING registered, pageable or "
                             "pinned, e.g. 8:registered")
        settings[f"{instances}x {staging}"] = {"instances": int(instances), "staging": staging,
                                              "max_batch": max_batch, **(overrides or {})}
    return settings


def run(args: argparse.Namespace) -> int:
    from ...framework.extras import require

    torch = require("torch", "sonic bench gpu (the network runs in torch, direct and served)")
    servers = parse_servers(args.servers, args.max_batch, network_overrides(args))
    bench = BenchReport.start("gpu", args.out)
    workdir = Path(tempfile.mkdtemp(prefix="sonic-bench-gpu-"))
    failures: dict[str, str] = {}
    try:
        patches = event_patches(args, workdir)
        event_files = []
        for i, event in enumerate(patches):
            np.save(workdir / f"event{i}.npy", event)
            event_files.append(workdir / f"event{i}.npy")
        print(f"{len(patches)} events, {np.mean([len(p) for p in patches]):.0f} patches/event", flush=True)
        module = load_network_module()
        paths = {"optimised": {"staging": "pinned", **network_overrides(args)}}
        if args.baseline:
            paths["baseline"] = dict(BASELINE)
        direct_stage_rows: dict[str, Any] = {}
        direct_rows: dict[str, list[dict[str, Any]]] = {}
        scores: dict[str, float] = {}
        reference = None if args.no_reference else reference_scores(patches[0])
        for name, settings in paths.items():
            net, staging = build(module, args.device, settings)
            direct_stage_rows[name] = direct_stages(net, staging, patches[0])
            if reference is not None and name == "optimised":
                em, michel = run_direct_event(net, staging, patches[0])
                scores["direct"] = float(max(np.abs(em - reference[0]).max(), np.abs(michel - reference[1]).max()))
            del net, staging
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
            print(f"direct {name}: {direct_stage_rows[name]['total_ms']:.1f} ms per event in stages", flush=True)
            spec = {"device": args.device, "settings": settings, "events": [str(p) for p in event_files]}
            direct_rows[name] = []
            for count in args.processes:
                for _ in range(args.repeat):
                    point = saturate("direct", spec, count, args.seconds, workdir)
                    point.pop("stats")
                    direct_rows[name].append(point)
                print(f"direct {name}: {count} processes, {point['events_per_s']:.1f} events/s, "
                      f"GPU {point['gpu_busy_percent'] or 0:.0f} %", flush=True)
        server_rows = []
        if args.baseline:
            servers = {"baseline 2x": {"instances": 2, **BASELINE}, **servers}
        for label, settings in servers.items():
            try:
                server_rows.append(measure_server(label.replace(" ", "_"), settings, args, event_files, workdir,
                                                  reference))
            except Exception as err:  # noqa: BLE001 - one setting failing keeps the others
                failures[f"server {label}"] = f"{type(err).__name__}: {err}"
                print(f"server {label}: FAILED {failures[f'server {label}']}", flush=True)
        for row in server_rows:
            if "score_max_abs_diff" in row:
                scores[f"server {row['label']}"] = row["score_max_abs_diff"]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    tolerance = TOLERANCE["cuda" if args.device.startswith("cuda") else "cpu"]
    for what, difference in scores.items():
        if difference > tolerance:
            failures[f"scores {what}"] = f"max |Δ| {difference:.2e} against onnxruntime exceeds {tolerance:g}"
    best_direct = best_median(direct_rows.get("optimised", []))
    best_server = max((best_median(row["points"]) for row in server_rows if not row["label"].startswith("baseline")),
                      default=0.0)
    summary = {"direct_events_per_s_at_saturation": best_direct, "server_events_per_s_at_saturation": best_server,
               "server_over_direct": best_server / best_direct if best_direct else 0.0,
               "server_ms_per_event_at_saturation": 1000 / best_server if best_server else 0.0}
    report = {**bench.fields(), "arguments": {k: v for k, v in vars(args).items() if not callable(v)},
              "events": len(patches),
              "patches_per_event": float(np.mean([len(p) for p in patches])),
              "mb_per_event": float(np.mean([p.nbytes for p in patches])) / 1e6,
              "direct_stages": direct_stage_rows, "direct": direct_rows, "servers": server_rows, "scores": scores,
              "summary": summary, "failures": failures}
    bench.write(markdown(report), report, {"gpu.png": lambda path: plot(report, path),
                                           "gpu_timeline.png": lambda path: plot_timeline(report, path)}, indent=1)
    return 1 if failures else 0


def served_score_difference(url: str, repo: Path, patches: np.ndarray, batch_size: int,
                            reference: tuple[np.ndarray, np.ndarray]) -> float:
    """Max |Δ| of one event's served scores against onnxruntime's, through the SONIC client."""
    from ...framework.inference import InferenceConfig, make_client
    from ...modules.protodune.emtrkmichelid import scores
    from .protodune import run_event

    client = make_client(InferenceConfig(mode="sonic", repository=[str(repo)], servers=[url], fallback=False,
                                         shared_memory="on"))
    try:
        served = run_event(client, patches, batch_size)
    finally:
        client.close()
    expected = scores([{"em_trk_none": reference[0], "michel": reference[1]}])
    return float(max(np.abs(served[k] - expected[k]).max() for k in expected))


def main(argv: list[str] | None = None) -> int:
    """Worker entry point: ``python -m sonic_hep.workflows.bench.gpu direct|client SPEC_JSON``."""
    role, spec = (argv or sys.argv[1:])[:2]
    {"direct": direct_worker, "client": client_worker}[role](json.loads(spec))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
