"""Many client jobs per inference server, the way the SONIC papers measured it: time per event vs jobs.

For each number of servers (``--servers 1 2``) and each number of jobs N (``--jobs 1 2 4 8``), N
separate processes each run the workflow's real client path (``configs/<workflow>.yaml`` through
``Process``: its source, preprocessing, producers and the SONIC client, one stream, one thread) against
the servers, plus a module that stands for the rest of a reconstruction job: ``--other-ms`` of sleep
(``--other-kind sleep``, so that this machine need not have N cores) or of busy CPU (``busy``). Jobs wait
at a barrier until all N have started, so they run together. Measured at each point:

* per-event time (median, p90) of the jobs, events/s of them all (while every job ran);
* per request, the server's queue and compute time (Triton's statistics API), and each server's share
  of the requests (balanced load);
* CPU over the steady events: the machine's, each server's (its process tree), the jobs' own per event
  (their process clocks at each event), and what is left, other processes' load; GPU utilisation
  (``nvidia-smi``) where present;
* bytes per second on the wire and in shared memory (the SONIC client's byte counters).

From the one-job point it predicts the knee as ``sonic plan`` does, with the bound that sets it
(:func:`~sonic_hep.workflows.grid.plan.plan`): the job's time per event alone, its ``t_other``, its CPU per
event and the server's, this machine's cores (the host bound: jobs and a CPU server share them); the
server bound from a CPU server's compute with that one job, or a GPU's over the loaded points (idle
between one job's events it runs slower). It simulates every point from the same figures
(``workflows/grid/simulate.py``: a CPU server executes on the jobs' cores). Both are drawn with the
measurement in ``scale.png`` ("processing time vs number of processes", the knees marked), the knee
measured with the same construction (:func:`measured_knee`). Results: ``scale.md``, ``scale.json``,
``scale.png``; ``python -m sonic_hep.workflows.bench.scale --redraw scale.json`` recomputes them.

Examples::

    sonic bench scale --workflow miniaod --jobs 1 2 4 8 16 --servers 1 2 --other-ms 60 --events 30
    sonic bench scale --workflow protodune --scale small --device gpu --jobs 1 40 80 100 120 140 160 200 240 \\
        --events 30 --warmup 4 --knee-at 120
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ...framework import Output, Param, Producer
from ..grid.plan import measure, plan, predicted_time_per_event
from ..grid.simulate import Scenario, from_measurement, simulate, steady_rate
from ._report import BenchReport, header

#: workflow → (configuration, repository for a CPU server, for a GPU server)
WORKFLOWS = {"demo": ("demo_inference", "data/models/demo", "data/models/demo"),  # toy jets, no input file
             "miniaod": ("miniaod", "data/models/miniaod", "data/models/miniaod"),
             "protodune": ("protodune", "data/models/protodune", "data/models/protodune_gpu")}
WARMUP = 2  #: first events of each job not counted (connections, model configs, caches)


class OtherWork(Producer):
    """The rest of a reconstruction job in a scale benchmark: ``ms`` of sleep or busy CPU per event.

    Records the wall-clock time of each call (one stream: consecutive calls are one event apart) and,
    in ``begin_job``, waits for the benchmark's barrier so that all jobs start together.
    """

    ms = Param(float, 100.0, doc="time per event (ms)")
    kind = Param(str, "sleep", doc="sleep (no CPU: more jobs than cores) or busy (CPU held)", choices=("sleep", "busy"))
    trace = Param(str, "", doc="file for the call times (JSON), written at the end of the job")
    go = Param(str, "", doc="file whose existence starts the events (the benchmark's barrier)")
    warmup = Param(int, WARMUP, doc="events after which '<trace>.warm' tells the benchmark this job is warm")
    after = Param(list, [], doc="products to wait for (the workflow's results): the work runs after its inference, "
                                "as in a single-threaded job, not while the event waits on the server")
    value = Output("int: the event index")

    def consumes(self) -> list[str]:
        return [*super().consumes(), *self.after]

    def begin_job(self) -> None:
        self._stamps: list[float] = []
        self._cpu: list[float] = []
        if self.go:
            Path(self.trace + ".ready").touch()
            deadline = time.monotonic() + 600
            while not os.path.exists(self.go) and time.monotonic() < deadline:
                time.sleep(0.02)

    def produce(self, event):
        self._stamps.append(time.time())  # wall clock: comparable between the jobs' processes
        self._cpu.append(time.process_time())  # this job's CPU (all its threads): its own cost per event
        if self.trace and len(self._stamps) == self.warmup + 1:
            Path(self.trace + ".warm").touch()
        if self.kind == "busy":
            end = time.perf_counter() + self.ms / 1000
            while time.perf_counter() < end:
                pass
        else:
            time.sleep(self.ms / 1000)
        event.put("value", event.index)

    def end_job(self) -> None:
        if self.trace:
            Path(self.trace).write_text(json.dumps({"wall": self._stamps, "cpu": self._cpu}))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workflow", choices=sorted(WORKFLOWS), default="miniaod")
    parser.add_argument("--input", help="ROOT file the jobs read (default: generate --events events)")
    parser.add_argument("--scale", choices=("full", "small"), default="small", help="ProtoDUNE event scale if generated")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2, 4, 8], help="numbers of concurrent jobs")
    parser.add_argument("--servers", type=int, nargs="+", default=[1], help="numbers of servers")
    parser.add_argument("--events", type=int, default=20, help="events per job")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="first events of each job not counted")
    parser.add_argument("--other-ms", type=float, default=100.0, help="non-ML time per event of a job (ms)")
    parser.add_argument("--other-kind", choices=("sleep", "busy"), default="sleep")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="the servers' device")
    parser.add_argument("--repository", help="model repository (default: the workflow's for --device)")
    parser.add_argument("--ort-threads", type=int, default=1, help="onnxruntime threads per model instance of each server")
    parser.add_argument("--shared-memory", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--point-timeout", type=float, default=300.0, help="seconds one point may take")
    parser.add_argument("--knee-at", type=float, metavar="K",
                        help="choose --other-ms from a pilot (N=1 and N=16, one server) so that the knee falls at about "
                             "K jobs per server, as the papers' runs chose their jobs")
    parser.add_argument("--server-instances", type=int, default=0,
                        help="executions a server runs side by side (default: the model's instance count if one model)")
    parser.add_argument("--sim-service-cv", type=float, default=0.0, help="simulation: server time spread (CV)")


# -- one job (a separate process) ---------------------------------------------------------------------
def job_main(spec_path: str) -> int:
    """Runs one client job from its spec (JSON): the workflow's configuration, SONIC on the given servers."""
    from ...framework import Process
    from ...framework import config as cfgmod

    spec = json.loads(Path(spec_path).read_text())
    source = [f"source.events={spec['events']}"] if spec["input"] is None else \
        [f"source.files=[{spec['input']}]", f"source.max_events={spec['events']}"]
    # one event per call: the bench models the papers' jobs, each event's request in turn (t_other + t_ml per event)
    overrides = [*source, "options.streams=1", "options.events_per_call=1",
                 "options.threads=1", "options.progress=false", "output.file=null", "services.inference.mode=sonic",
                 f"services.inference.servers=[{','.join(spec['servers'])}]", "services.inference.fallback=false",
                 f"services.inference.repository=[{spec['repository']}]",
                 f"services.inference.shared_memory='{spec['shared_memory']}'",  # quoted: YAML reads off as false
                 *spec.get("overrides", [])]  # the caller's own settings last (e.g. the network bench's keepalive)
    if spec["workflow"] == "protodune":
        overrides.append("source.chunk_size=1")  # full events are ~130 MB of patches each: one at a time
    cfg = cfgmod.load(WORKFLOWS[spec["workflow"]][0], overrides)
    results = [product.split(" as ")[0].strip() for product in cfg.output.products]
    cfg.modules["other"] = cfgmod.ModuleConfig("other", f"{__name__}:OtherWork", {
        "ms": spec["other_ms"], "kind": spec["other_kind"], "trace": spec["trace"], "go": spec["go"],
        "warmup": spec["warmup"], "after": [key for key in results if ":" in key]})
    cfg.path = [*cfg.path, "other"]
    cfg.output.products = [*cfg.output.products, "other:value"]  # kept (not pruned) though nothing is written
    Process(cfg).run(timing_json=spec["timing"], progress=False)
    return 0


def node_placement(servers: int, device: str) -> list[list[int] | None]:
    """Each local server's cards: on a GPU machine an equal slice of the cards this process may use (one server
    per card where there are as many), so that no two servers put their instances on one card unless there are
    more servers than cards (said once); None (every card, or a CPU server) where no card is found."""
    from ...framework.inference.serving import available_cards, node_shares

    cards = available_cards() if device == "gpu" else []
    if not cards:
        return [None] * servers
    shares, note = node_shares(servers, cards)
    if note:
        print(f"note: {note}", flush=True)
    return list(shares)


def model_instances(repository: str) -> int:
    """Executions a server runs side by side: the instance count of a one-model repository (the GPU's two
    ProtoDUNE instances); 1 for several models (on a CPU server they share the same cores)."""
    from ...framework.inference import ModelRepository

    repo = ModelRepository([repository])
    names = list(repo.names())
    if len(names) != 1:
        return 1
    groups = repo.get(names[0]).config_dict.get("instance_group") or [{}]
    return max(1, sum(int(group.get("count", 1)) for group in groups))


# -- measuring ------------------------------------------------------------------------------------------
class GpuSampler:
    """Each card's utilisation (%) and memory in use (MiB), sampled with nvidia-smi every ``period`` s while
    running; empty without a GPU. ``samples`` / ``memory_mib`` are the machine's (mean busy, summed memory)
    per sample, :meth:`over` each card's over a stretch of time."""

    def __init__(self, period: float = 0.5):
        self.cards: list[tuple[float, dict[str, tuple[float, float]]]] = []  # (time.time(), {card: (busy, MiB)})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period,), daemon=True)

    def _run(self, period: float) -> None:
        import shutil

        if not shutil.which("nvidia-smi"):
            return
        while not self._stop.wait(period):
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used",
                                      "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5,
                                     check=False).stdout
                rows = [[x.strip() for x in line.split(",")] for line in out.splitlines() if line.strip()]
                self.cards.append((time.time(), {r[0]: (float(r[1]), float(r[2])) for r in rows}))
            except (OSError, subprocess.SubprocessError, ValueError, IndexError):
                return

    @property
    def samples(self) -> list[float]:
        """The cards' mean utilisation (%) at each sample."""
        return [float(np.mean([busy for busy, _ in cards.values()])) for _, cards in self.cards if cards]

    @property
    def memory_mib(self) -> list[float]:
        """Memory in use summed over the cards (MiB) at each sample."""
        return [float(sum(mib for _, mib in cards.values())) for _, cards in self.cards if cards]

    def over(self, start: float, stop: float) -> dict[str, dict[str, float]]:
        """``{card: {"busy_percent", "memory_mib"}}``: mean busy and peak memory between ``start`` and ``stop``."""
        inside = [cards for t, cards in self.cards if start <= t <= stop] or [c for _, c in self.cards]
        names = sorted({name for cards in inside for name in cards}, key=lambda n: (len(n), n))
        return {name: {"busy_percent": float(np.mean([c[name][0] for c in inside if name in c])),
                       "memory_mib": float(max(c[name][1] for c in inside if name in c))} for name in names}

    def __enter__(self) -> GpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)


class CpuSampler:
    """The machine's busy CPU seconds and each server's (its process tree) every ``period`` s while running,
    so that CPU use is read over exactly the stretch of steady events the times per event come from (a
    window from the jobs' warm-up to the first exit counts start-up, ramp and a job's teardown too)."""

    def __init__(self, pids: list[int], period: float = 0.1):
        self.samples: list[tuple[float, float, list[float]]] = []  # (time.time(), busy s, [server s])
        self._pids = pids
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period,), daemon=True)

    def sample(self) -> None:
        import psutil

        from ._load import process_tree_cpu

        times = psutil.cpu_times()._asdict()  # guest time is already part of user time: not counted twice
        busy = sum(v for k, v in times.items() if k not in ("idle", "iowait", "guest", "guest_nice"))
        self.samples.append((time.time(), busy, [process_tree_cpu(pid) for pid in self._pids]))

    def _run(self, period: float) -> None:
        while not self._stop.wait(period):
            self.sample()

    def over(self, start: float, stop: float) -> tuple[float, float, list[float]] | None:
        """(seconds, machine busy cores, each server's cores) between the samples nearest ``start`` and
        ``stop``; None when they are the same sample."""
        if len(self.samples) < 2:
            return None
        a = min(self.samples, key=lambda sample: abs(sample[0] - start))
        b = min(self.samples, key=lambda sample: abs(sample[0] - stop))
        span = b[0] - a[0]
        if span <= 0:
            return None
        return span, (b[1] - a[1]) / span, [(y - x) / span for x, y in zip(a[2], b[2])]

    def __enter__(self) -> CpuSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)
        self.sample()


def server_statistics(urls: list[str]) -> list[dict[str, dict[str, float]]]:
    """Each server's cumulative Triton counters per model."""
    from ...framework.inference.sonic import ServerConnection
    from ...framework.inference import ServerSpec

    out = []
    for url in urls:
        connection = ServerConnection(ServerSpec(url))
        try:
            out.append({model: stats for (model, _), stats in connection.statistics().items()})
        finally:
            connection.close(0)
    return out


def server_deltas(before: list[dict], after: list[dict]) -> list[dict[str, float]]:
    """Per server: requests, executions, queue and compute seconds during the point (all models)."""
    from ...framework.inference.sonic import compute_ns

    out = []
    for old, new in zip(before, after):
        total = {"requests": 0.0, "executions": 0.0, "queue_s": 0.0, "compute_s": 0.0}
        for model, stats in new.items():
            prev = old.get(model, {})
            total["requests"] += stats["requests"] - prev.get("requests", 0)
            total["executions"] += stats["executions"] - prev.get("executions", 0)
            total["queue_s"] += (stats["queue_ns"] - prev.get("queue_ns", 0)) / 1e9
            total["compute_s"] += (compute_ns(stats) - compute_ns(prev)) / 1e9
        out.append(total)
    return out


def measure_point(jobs: int, servers: list[Any], args: argparse.Namespace, repository: str, path: str | None,
                  work: Path) -> dict[str, Any]:
    """Runs ``jobs`` client jobs together against ``servers``; returns the point's row."""
    import psutil

    from ._load import process_tree_cpu

    urls = [server.grpc_url for server in servers]
    folder = work / f"s{len(servers)}_n{jobs}"
    folder.mkdir(parents=True, exist_ok=True)
    go = folder / "go"
    procs, traces, timings = [], [], []
    for k in range(jobs):
        spec = {"workflow": args.workflow, "input": path, "events": args.events, "servers": urls,
                "repository": repository, "shared_memory": args.shared_memory, "other_ms": args.other_ms,
                "other_kind": args.other_kind, "trace": str(folder / f"trace{k}.json"), "go": str(go),
                "warmup": args.warmup,
                "timing": str(folder / f"timing{k}.json")}
        (folder / f"spec{k}.json").write_text(json.dumps(spec))
        traces.append(Path(spec["trace"]))
        timings.append(Path(spec["timing"]))
        log = open(folder / f"job{k}.log", "w")  # noqa: SIM115 - closed when the job ends
        procs.append((subprocess.Popen([sys.executable, "-m", __name__, str(folder / f"spec{k}.json")],
                                       stdout=log, stderr=subprocess.STDOUT), log))
    deadline = time.monotonic() + args.point_timeout
    try:
        while sum(Path(str(t) + ".ready").exists() for t in traces) < jobs:
            failed = [k for k, (p, _) in enumerate(procs) if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                raise RuntimeError(f"job {failed[0] if failed else '?'} failed or did not start: see "
                                   f"{folder / f'job{failed[0] if failed else 0}.log'}")
            time.sleep(0.05)
        go.touch()

        def running() -> bool:
            return all(p.poll() is None for p, _ in procs) and time.monotonic() < deadline

        # the steady window: from every job past its warm-up events to the first job's end (server
        # statistics, CPU and GPU are read over it; first executions load models and fill caches)
        # (90 % of them: with hundreds of jobs the last to start may be warm only after the first ended)
        while running() and sum(Path(str(t) + ".warm").exists() for t in traces) < 0.9 * jobs:
            time.sleep(0.02)
        before = server_statistics(urls)
        server_cpu = [process_tree_cpu(server.pid) for server in servers]
        cpu = psutil.cpu_times()
        start = time.time()
        with GpuSampler() as gpu, CpuSampler([server.pid for server in servers]) as sampled:
            while running():
                time.sleep(0.02)
            elapsed = time.time() - start
            cpu_after = psutil.cpu_times()
            server_cpu = [process_tree_cpu(server.pid) - c for server, c in zip(servers, server_cpu)]
            after = server_statistics(urls)
        for p, log in procs:
            p.wait(max(1.0, deadline - time.monotonic()))
            log.close()
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            log.close()
    bad = [k for k, (p, _) in enumerate(procs) if p.returncode != 0]
    if bad:
        raise RuntimeError(f"job {bad[0]} exited with {procs[bad[0]][0].returncode}: see {folder / f'job{bad[0]}.log'}")
    recorded = [json.loads(t.read_text()) for t in traces]
    stamps = [r["wall"] for r in recorded]
    # a job's CPU per event in its steady events (start-up and first events excluded; the busy stand-in's
    # own CPU taken out, it is part of --other-ms)
    busy = args.other_ms / 1000 if args.other_kind == "busy" else 0.0
    steady_cpu = [(r["cpu"][-1] - r["cpu"][args.warmup]) / (len(r["cpu"]) - 1 - args.warmup) - busy
                  for r in recorded if len(r["cpu"]) > args.warmup + 1]
    # its spread from event to event (the simulation draws the jobs' CPU with it)
    each_cpu = np.concatenate([np.diff(r["cpu"][args.warmup:]) - busy for r in recorded if len(r["cpu"]) > args.warmup + 2]
                              or [np.zeros(0)])
    cpu_cv = float(np.std(each_cpu) / np.mean(each_cpu)) if len(each_cpu) > 1 and np.mean(each_cpu) > 0 else 0.0
    warm = args.warmup
    completions = [s[warm + 1:] for s in stamps]  # the start of event i+1 is the end of event i
    first = max(c[0] for c in completions if c)
    last = min(c[-1] for c in completions if c)
    durations = [b - a for s in stamps for a, b in zip(s[warm:], s[warm + 1:]) if first <= b <= last]
    durations = durations or [b - a for s in stamps for a, b in zip(s[warm:], s[warm + 1:])]
    deltas = server_deltas(before, after)
    requests = sum(d["requests"] for d in deltas) or 1.0
    reports = [json.loads(t.read_text()) for t in timings]
    models = [m for r in reports for m in r["inference"]["models"].values()]
    events = sum(r["events"] for r in reports)
    per_event = sum(m.get("requests", 0) for m in models) / max(1, events)  # the clients' count, whole jobs
    # each server's share of every request the jobs sent (the clients' own count: the steady window's
    # server statistics hold too few requests at small N to judge balance)
    sent_to = {url: sum(m.get("servers", {}).get(url, 0) for m in models) for url in urls}
    share = [n / (sum(sent_to.values()) or 1) for n in sent_to.values()]
    # Triton counts an execution's compute once for each request in it: the device was busy
    # compute × executions / requests (dynamic batching merges requests under load)
    executions = sum(d["executions"] for d in deltas)
    compute_per_request = sum(d["compute_s"] for d in deltas) / requests
    busy_per_request = compute_per_request * min(1.0, executions / requests)
    sent = sum(m.get("bytes_sent", 0) for m in models)
    received = sum(m.get("bytes_received", 0) for m in models)
    shm = sum(m.get("shm_bytes", 0) for m in models)
    rate = steady_rate(completions)
    inside = sum(1 for c in completions for t in c if first <= t <= last)
    if inside < 2 * jobs:  # the jobs' steady stretches hardly overlap (staggered ends): the closed-loop law
        rate = jobs / float(np.mean(durations))
    busy = sum(cpu_after) - sum(cpu)
    idle = (cpu_after.idle + getattr(cpu_after, "iowait", 0)) - (cpu.idle + getattr(cpu, "iowait", 0))
    cpu_percent = 100 * (busy - idle) / busy if busy > 0 else 0.0
    server_cpu_percent = [100 * c / elapsed for c in server_cpu]
    # the host's CPU over the steady events: the jobs' (their own clocks at each event), each server's and
    # the machine's; what is left is other processes' load (a shared machine's, or this benchmark's own),
    # which takes cores from the jobs
    steady = sampled.over(first, last) if last > first else None
    host: dict[str, Any] = {}
    if steady is not None:
        span, machine_cores, server_cores = steady
        job_cores = 0.0
        for r in recorded:
            mine = [(w, c) for w, c in zip(r["wall"][warm:], r["cpu"][warm:]) if first <= w <= last]
            if len(mine) >= 2 and mine[-1][0] > mine[0][0]:
                job_cores += (mine[-1][1] - mine[0][1]) / (mine[-1][0] - mine[0][0])
        cores = len(os.sched_getaffinity(0))
        cpu_percent = 100 * machine_cores / cores
        server_cpu_percent = [100 * c for c in server_cores]
        host = {"steady_s": span, "job_cores": job_cores, "other_load_cores": machine_cores - job_cores - sum(server_cores),
                "server_cpu_s_per_event": sum(server_cores) / rate if rate > 0 else None}
    planned = measure(timings)
    return {"servers": len(servers), "jobs": jobs, "events": events, "seconds": elapsed, "repository": repository,
            "time_per_event_median": statistics.median(durations), "time_per_event_p90": float(np.percentile(durations, 90)),
            "events_per_s": rate, "queue_ms_per_request": 1000 * sum(d["queue_s"] for d in deltas) / requests,
            "compute_ms_per_request": 1000 * compute_per_request,
            "requests_per_event": per_event, "server_share": share, "server_requests": list(sent_to.values()),
            "executions_per_request": executions / requests, "server_compute_s_per_event": busy_per_request * per_event,
            "cpu_percent": cpu_percent, "server_cpu_percent": server_cpu_percent, **host,
            "gpu_percent": float(np.mean(gpu.samples)) if gpu.samples else None,
            "bytes_per_event": (sent + received) / max(1, events), "sent_fraction": sent / (sent + received) if sent + received else None,
            "wire_mb_per_s": (sent + received - shm) / max(1, events) * rate / 1e6,
            "shm_mb_per_s": shm / max(1, events) * rate / 1e6,
            "other_s_per_event": planned.other_s_per_event, "wait_s_per_event": planned.wait_s_per_event,
            "client_cpu_s_per_event": float(np.median(steady_cpu)) if steady_cpu else planned.cpu_s_per_event,
            "client_cpu_cv": cpu_cv}


# -- predictions ----------------------------------------------------------------------------------------
def predictions(points: list[dict[str, Any]], args: argparse.Namespace, cores: int) -> dict[str, Any]:
    """The planner's knee (with the bound that sets it) and the simulation of every point, from the one-job,
    one-server point: its time per event alone, its t_other, its CPU per event and the server's CPU per
    event with that one job; ``cores``: the measuring machine's."""
    base = next((p for p in points if p["jobs"] == 1 and p["servers"] == 1), None)
    if base is None:
        return {"note": "no N=1 point with one server: nothing to predict from"}
    instances = args.server_instances or model_instances(base["repository"])
    loaded = [p for p in points if p["servers"] == 1 and p["jobs"] > 1] or [base]
    if args.device == "gpu":
        # a GPU's compute per event under load: the median over the loaded one-server points (a GPU idle
        # between one job's events runs slower clocks and colder caches: ProtoDUNE's compute per request
        # halves from N=1 to N=40 on an H100; the median keeps one disturbed point from deciding)
        t_server, t_from = statistics.median(p["server_compute_s_per_event"] for p in loaded) / instances, \
            f"median of N={'/'.join(str(p['jobs']) for p in loaded)}"
    else:
        # a CPU server: its compute with one job (under load its wall time per request also counts waiting
        # for the host's cores, which is the host's bound, counted there)
        t_server, t_from = base["server_compute_s_per_event"] / instances, "N=1"
    # the flat line: one job with the server to itself (its t_other where that, averaged over its start-up
    # events too, is a little longer); its producers' requests overlap its own work, so t_ml is what is left
    alone = max(base["time_per_event_median"], base["other_s_per_event"])
    latency = alone - base["other_s_per_event"]
    # the host's CPU per event: the job's (process time over its steady events: modules, framework and the
    # client's gRPC threads) and, the servers running on this host, the server's (its process tree's CPU
    # per event; a CPU server's compute where not recorded; a GPU server's host CPU is then unknown: 0)
    server_cpu = base.get("server_cpu_s_per_event")
    if server_cpu is None:
        server_cpu = t_server * instances if args.device == "cpu" else 0.0
    host_cpu = base["client_cpu_s_per_event"] + server_cpu
    result = plan(base["other_s_per_event"], t_server, base["bytes_per_event"] or None, latency_s_per_event=latency,
                  cores=cores if host_cpu > 0 else None, host_cpu_s_per_event=host_cpu if host_cpu > 0 else None)
    # the simulation: a CPU server executes on the host's cores (its CPU per event is its work there), a GPU
    # server's host CPU, if measured, is added to the job's
    on_cores = args.device == "cpu" and host_cpu > 0
    settings = from_measurement(base["other_s_per_event"], server_cpu if on_cores else t_server * instances,
                                base["requests_per_event"], base["bytes_per_event"], base["sent_fraction"] or 1.0,
                                instances=instances, cores=cores if host_cpu > 0 else 0, server_on_cores=on_cores,
                                cpu_cv=base.get("client_cpu_cv") or 0.0, service_cv=args.sim_service_cv,
                                events=args.events, warmup=args.warmup)
    job_cpu = base["client_cpu_s_per_event"] if on_cores else host_cpu
    # one simulated job alone takes exactly the measured time per event: t_other is shortened where the
    # simulation would run after it the requests that really overlapped it
    service = settings["service_s"] * math.ceil(settings["requests"] / instances)
    settings["other_s"] = max(alone - service, min(job_cpu, alone))
    settings["overhead_s"] = max(0.0, alone - service - settings["other_s"])
    settings["cpu_s"] = min(job_cpu, settings["other_s"])
    for point in points:
        sim = simulate(Scenario(jobs=point["jobs"], servers=point["servers"], **settings))
        point["simulated_time_per_event_median"] = sim.time_per_event_median
        point["simulated_events_per_s"] = sim.events_per_s
        point["simulated_server_share"] = sim.server_share
        point["predicted_time_per_event"] = float(predicted_time_per_event(
            point["jobs"], base["other_s_per_event"], latency, t_server, point["servers"], host_cpu, cores))
        point["simulation_error"] = sim.time_per_event_median / point["time_per_event_median"] - 1
    # other processes' load during the loaded points: the cores they took were not free for the jobs
    others = [p["other_load_cores"] for p in loaded if p.get("other_load_cores") is not None]
    return {"from": f"t_other, t_ml, CPU per event: N=1, one server; t_server: {t_from}",
            "t_other_s": base["other_s_per_event"], "t_server_s": t_server, "t_ml_s": latency, "alone_s": alone,
            "instances": instances, "cores": cores, "job_cpu_s_per_event": base["client_cpu_s_per_event"],
            "server_cpu_s_per_event": server_cpu, "host_cpu_s_per_event": host_cpu,
            "knee_jobs_per_server": result.knee_jobs_per_server, "host_knee_jobs": result.host_knee_jobs,
            "knee_jobs": result.knee_jobs, "bound": result.bound, "jobs_per_server": result.jobs_per_server,
            "other_load_cores": statistics.median(others) if others else None, "simulation_settings": settings}


def measured_knee(points: list[dict[str, Any]], servers: int) -> dict[str, Any]:
    """Where the flat line (one job's time per event) meets the saturated one (N / the highest events/s):
    the same asymptotes the planner draws. ``saturated`` says whether the range reached saturation."""
    mine = sorted((p for p in points if p["servers"] == servers), key=lambda p: p["jobs"])
    if not mine:
        return {}
    flat = mine[0]["time_per_event_median"]
    top = max(p["events_per_s"] for p in mine)
    saturated = mine[-1]["time_per_event_median"] > 1.2 * flat
    return {"servers": servers, "flat_s": flat, "max_events_per_s": top, "knee_jobs": flat * top,
            "knee_jobs_per_server": flat * top / servers, "saturated": saturated}


def knee_for(pred: dict[str, Any], servers: int) -> float:
    """The predicted knee in jobs with ``servers`` servers: the server bound grows with them, the host's not."""
    return min(pred["knee_jobs_per_server"] * servers, pred.get("host_knee_jobs") or math.inf)


def bound_for(pred: dict[str, Any], servers: int) -> str:
    host = pred.get("host_knee_jobs")
    return "host" if host is not None and host < pred["knee_jobs_per_server"] * servers else "server"


# -- report -------------------------------------------------------------------------------------------
def markdown(report: dict[str, Any]) -> str:
    args = report["arguments"]
    pred = report["prediction"]
    lines = [*header("sonic bench scale", report,
                     f"Workflow: {args['workflow']} ({report['input']}), {args['events']} events per job (first "
                     f"{args['warmup']} not counted), other work {args['other_ms']:g} ms/event ({args['other_kind']}), "
                     f"servers on {args['device']}, shared memory {args['shared_memory']}",
                     f"Cores for the jobs and servers: {report.get('cores', '?')}; models served by: "
                     f"{', '.join(sorted(set((report.get('server_backends') or {}).values()))) or 'not recorded'}"),
             "| servers | jobs | s/event median | p90 | events/s | queue ms/req | compute ms/req | exec/req | CPU % | server CPU % "
             "| GPU % | wire MB/s | shm MB/s | share per server | predicted s/event | simulated s/event | sim − meas |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in report["points"]:
        gpu = "—" if p["gpu_percent"] is None else f"{p['gpu_percent']:.0f}"
        lines.append(f"| {p['servers']} | {p['jobs']} | {p['time_per_event_median']:.4f} | {p['time_per_event_p90']:.4f} | "
                     f"{p['events_per_s']:.2f} | {p['queue_ms_per_request']:.2f} | {p['compute_ms_per_request']:.2f} | "
                     f"{p['executions_per_request']:.2f} | "
                     f"{p['cpu_percent']:.0f} | {' '.join(f'{c:.0f}' for c in p['server_cpu_percent'])} | {gpu} | "
                     f"{p['wire_mb_per_s']:.2f} | {p['shm_mb_per_s']:.2f} | "
                     f"{' '.join(f'{s:.3f}' for s in p['server_share'])} | {p.get('predicted_time_per_event', math.nan):.4f} | "
                     f"{p.get('simulated_time_per_event_median', math.nan):.4f} | {100 * p.get('simulation_error', math.nan):+.0f} % |")
    lines += ["", "Knee (jobs per server where the time per event starts to grow):", ""]
    for knee in report["knees"]:
        lines.append(f"- {knee['servers']} server(s): measured {knee['knee_jobs_per_server']:.1f} jobs per server "
                     f"(flat {knee['flat_s']:.4f} s/event × {knee['max_events_per_s']:.2f} events/s at most"
                     f"{'' if knee['saturated'] else '; NOT saturated in this range: a lower bound'})")
    if "knee_jobs_per_server" in pred:
        lines.append(f"- predicted by `sonic plan` ({pred['from']}), the same construction: a job alone takes "
                     f"{pred['alone_s']:.4f} s/event (t_other {pred['t_other_s']:.4f} + t_ml {pred['t_ml_s']:.4f});")
        lines.append(f"  - server bound: / t_server {pred['t_server_s']:.4f} = {pred['knee_jobs_per_server']:.1f} jobs per "
                     f"server (t_server: compute per event / {pred['instances']} instance(s))")
        if pred.get("host_knee_jobs"):
            lines.append(f"  - host bound: × {pred['cores']} cores / {1000 * pred['host_cpu_s_per_event']:.1f} ms of CPU per "
                         f"event (the job's {1000 * pred['job_cpu_s_per_event']:.1f} + the server's "
                         f"{1000 * pred['server_cpu_s_per_event']:.1f}) = {pred['host_knee_jobs']:.1f} jobs on this host")
        for knee in report["knees"]:
            predicted = knee_for(pred, knee["servers"])
            lines.append(f"  - {knee['servers']} server(s): predicted knee {predicted:.1f} jobs ({bound_for(pred, knee['servers'])} "
                         f"bound), measured {knee['knee_jobs']:.1f}: {100 * (predicted / knee['knee_jobs'] - 1):+.0f} %"
                         f"{'' if knee['saturated'] else ' (the measured knee is a lower bound)'}")
        if pred.get("other_load_cores") is not None:
            lines.append(f"- other processes on this host used {pred['other_load_cores']:.2f} cores (median over the loaded "
                         f"points: busy CPU less the jobs' and the servers'); those were not free for the jobs")
            free = pred["cores"] - pred["other_load_cores"]
            if pred.get("host_knee_jobs") and pred["other_load_cores"] > 0.1 and free > 0:
                lines.append(f"  - on the {free:.2f} cores they left free the host bound is "
                             f"{pred['host_knee_jobs'] * free / pred['cores']:.1f} jobs (a disturbed measurement: rerun "
                             f"on an idle host)")
    balance = [p for p in report["points"] if p["servers"] > 1]
    if balance:
        worst = max(max(abs(s * p["servers"] - 1) for s in p["server_share"]) for p in balance)
        simulated = [p["simulated_server_share"] for p in balance if "simulated_server_share" in p]
        # no one-job, one-server point (--servers 2 alone): nothing was simulated to compare with
        also = (f" (simulated: {100 * max(max(abs(s * len(shares) - 1) for s in shares) for shares in simulated):.1f} %)"
                if simulated else "")
        lines.append(f"- balance: largest deviation of a server's share from even: {100 * worst:.1f} %{also}")
    return "\n".join(lines) + "\n"


def plot_figure(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = ["#4477aa", "#ee6677", "#228833", "#ccbb44"]
    pred = report["prediction"]
    for index, servers in enumerate(sorted({p["servers"] for p in report["points"]})):
        mine = sorted((p for p in report["points"] if p["servers"] == servers), key=lambda p: p["jobs"])
        n = np.array([p["jobs"] for p in mine])
        median = np.array([p["time_per_event_median"] for p in mine])
        p90 = np.array([p["time_per_event_p90"] for p in mine])
        colour = colours[index % len(colours)]
        ax.errorbar(n, median, yerr=[np.zeros_like(median), np.maximum(p90 - median, 0)], fmt="o-", color=colour,
                    capsize=3, label=f"measured, {servers} server(s) (median, p90)")
        if "simulated_time_per_event_median" in mine[0]:
            ax.plot(n, [p["simulated_time_per_event_median"] for p in mine], "x", color=colour, markersize=8,
                    label=f"simulated, {servers} server(s)")
        bx.plot(n, [p["events_per_s"] for p in mine], "o-", color=colour, label=f"measured, {servers} server(s)")
        if "knee_jobs_per_server" in pred:
            grid = np.linspace(1, max(n), 200)
            curve = predicted_time_per_event(grid, pred["t_other_s"], pred["t_ml_s"], pred["t_server_s"], servers,
                                             pred.get("host_cpu_s_per_event") or 0.0, pred["cores"])
            ax.plot(grid, curve, "--", color=colour, alpha=0.7, label=f"sonic plan, {servers} server(s)")
            bx.plot(grid, grid / curve, "--", color=colour, alpha=0.7)
            ax.axvline(knee_for(pred, servers), color=colour, linestyle=":", alpha=0.8,
                       label=f"sonic plan knee {knee_for(pred, servers):.3g} jobs ({bound_for(pred, servers)} bound)")
        knee = next((k for k in report["knees"] if k["servers"] == servers), None)
        if knee:
            ax.axvline(knee["knee_jobs"], color=colour, linestyle="-", alpha=0.3, linewidth=4,
                       label=f"measured knee {knee['knee_jobs']:.3g} jobs" + ("" if knee["saturated"] else " (≥)"))
    ax.set_xlabel("number of client processes")
    ax.set_ylabel("processing time per event (s)")
    ax.set_ylim(0, None)
    ax.set_title(f"{report['arguments']['workflow']}: time per event vs processes")
    ax.legend(fontsize=7)
    bx.set_xlabel("number of client processes")
    bx.set_ylabel("events/s (all jobs)")
    bx.set_ylim(0, None)
    bx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def _input(args: argparse.Namespace, out: Path) -> str | None:
    if args.workflow == "demo":
        return None  # its source makes toy jets
    if args.input:
        import uproot

        from ...framework.errors import SonicError

        entries = uproot.open(args.input)["Events"].num_entries
        if entries < args.events:  # the jobs would stop early and the report claim events they never ran
            raise SonicError(f"--input {args.input} has {entries} events, fewer than --events {args.events}")
        return str(Path(args.input).resolve())
    path = out / f"{args.workflow}_input.root"
    if not path.exists():
        if args.workflow == "miniaod":
            from ...data.miniaod.generate import generate

            generate(path, args.events, seed=11)
        else:
            from ...data.protodune.generate import generate as generate_protodune

            generate_protodune(path, args.events, args.scale, seed=21)
    return str(path.resolve())


def choose_other_ms(args: argparse.Namespace, repository: str, path: str | None, work: Path) -> dict[str, Any]:
    """Sets ``args.other_ms`` so that the planner's knee falls at ``args.knee_at`` jobs per server, from a
    pilot of N=1 and N=16 on one server with the given ``--other-ms``; returns the pilot."""
    from ...framework.inference.serving import TritonServer

    server = TritonServer([repository], device=args.device, ort_threads=args.ort_threads)
    try:
        server.start()
        points = [measure_point(n, [server], args, repository, path, work) for n in (1, 16)]
    finally:
        server.stop()
    pred = predictions(points, args, len(os.sched_getaffinity(0)))
    fixed = points[0]["other_s_per_event"] - args.other_ms / 1000  # preprocessing and framework per event
    other = max(0.01, args.knee_at * pred["t_server_s"] - pred["t_ml_s"] - fixed)
    print(f"pilot: t_server {pred['t_server_s']:.4f} s, t_ml {pred['t_ml_s']:.4f} s, rest of the job {fixed:.4f} s "
          f"-> --other-ms {1000 * other:.1f} for a knee at {args.knee_at:g} jobs per server", flush=True)
    chosen = {"points": points, "prediction": pred, "other_ms_given": args.other_ms, "other_ms_chosen": 1000 * other}
    args.other_ms = round(1000 * other, 1)
    return chosen


def run(args: argparse.Namespace) -> int:
    from ...framework.inference.serving import TritonServer
    from ...framework.inference import resolve_repository

    bench = BenchReport.start("scale", args.out)
    out = bench.out
    path = _input(args, out)
    repository = str(resolve_repository(args.repository or WORKFLOWS[args.workflow][2 if args.device == "gpu" else 1]))
    points: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    backends: dict[str, str] = {}  # what served each model (a native or a python-based onnxruntime backend)
    work = out / "jobs"
    pilot = choose_other_ms(args, repository, path, out / "pilot") if args.knee_at else None
    for count in sorted(set(args.servers)):
        servers = [TritonServer([repository], device=args.device, ort_threads=args.ort_threads, gpus=gpus)
                   for gpus in node_placement(count, args.device)]
        try:
            for server in servers:
                server.start()
                backends.update(getattr(server, "model_backends", None) or {})
            for jobs in sorted(set(args.jobs)):
                try:
                    points.append(measure_point(jobs, servers, args, repository, path, work))
                except Exception as err:  # noqa: BLE001 - a failed point is reported, the others kept
                    failures[f"{count} servers, {jobs} jobs"] = f"{type(err).__name__}: {err}"
                    print(f"{count} server(s), {jobs} jobs: FAILED {failures[f'{count} servers, {jobs} jobs']}", flush=True)
                    continue
                p = points[-1]
                print(f"{count} server(s), {jobs:4d} jobs: {p['time_per_event_median']:.4f} s/event (p90 "
                      f"{p['time_per_event_p90']:.4f}), {p['events_per_s']:.2f} events/s, shares "
                      f"{[round(s, 3) for s in p['server_share']]}", flush=True)
        finally:
            for server in servers:
                server.stop()
    cores = len(os.sched_getaffinity(0))  # the cores this benchmark (its jobs and servers) may run on
    prediction = predictions(points, args, cores)
    report = {**bench.fields(), "cores": cores,
              "arguments": {k: v for k, v in vars(args).items() if not callable(v)},
              "input": os.path.basename(path) if path else "generated toy jets", "server_backends": backends,
              "points": points, "prediction": prediction, "failures": failures, "pilot": pilot,
              "knees": [k for k in (measured_knee(points, s) for s in sorted({p["servers"] for p in points})) if k]}
    bench.write(markdown(report), report, {"scale.png": lambda figure: plot_figure(report, figure)} if points else {},
                indent=1)
    return 1 if failures else 0


def redraw(path: str) -> None:
    """Recomputes the predictions, knees, table and figure of a saved ``scale.json`` in place (for results
    measured elsewhere, e.g. on a GPU machine, after the analysis changed)."""
    path_ = Path(path)
    report = json.loads(path_.read_text())
    args = argparse.Namespace(**report["arguments"])
    for name, default in (("server_instances", 0), ("sim_service_cv", 0.0), ("warmup", WARMUP)):
        if not hasattr(args, name):
            setattr(args, name, default)
    if not args.server_instances:  # the repository was on the machine that measured
        args.server_instances = report["prediction"].get("instances", 0)
    for point in report["points"]:
        point.setdefault("client_cpu_s_per_event", 0.0)
    if "cores" not in report:  # results measured before the report named them: the machine's description does
        found = re.search(r"(\d+) cores", report["machine"])
        report["cores"] = int(found.group(1)) if found else len(os.sched_getaffinity(0))
    report["prediction"] = predictions(report["points"], args, report["cores"])
    report["knees"] = [k for k in (measured_knee(report["points"], s) for s in sorted({p["servers"] for p in report["points"]})) if k]
    bench = BenchReport("scale", path_.parent, report["machine"], report["command"], report.get("date", ""), path_.stem)
    bench.write(markdown(report), report, {f"{path_.stem}.png": lambda figure: plot_figure(report, figure)}, indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "--redraw":
        redraw(sys.argv[2])
        sys.exit(0)
    sys.exit(job_main(sys.argv[1]))
