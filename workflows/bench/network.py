"""SONIC over a network, not loopback: per-event time against round trip, rate and loss, and jobs per link.

Everything runs in the network lab (``workflows/netlab``): the Triton server (``sonic server start
--config WORKFLOW``) in one network namespace, the jobs in another, a veth pair between them shaped by the
kernel (rate, loss) and a relay in user space for the round trip where the kernel has no netem. The relay
is in the path at every point, the unshaped one too, so every point pays its cost alike; a pair of runs at
the unshaped point, with and without it, says what that cost is per event.

Two measurements:

* **the sweep**: for each workflow (``--workflows miniaod,protodune``), each link (``--links``, e.g.
  ``rtt=100ms``, ``rate=100mbit,rtt=50ms``, ``rtt=10ms,loss=1%``) and each streams setting (``--streams 1 4``),
  one job (``configs/<workflow>.yaml`` as shipped, SONIC, shared memory off), run right after one at the
  unshaped link (a pair: on a shared machine only runs close in time compare). Per job: the time per event of
  its steady part (the batches completed while every stream had one in flight: start-up, connections and the
  drain left out) and the bytes of those very events each way, the whole job's time per event, requests per
  event, CPU per event of the job, the server and the relay. Direct inference once per streams setting and
  repeat (it crosses no link). Each point is set against its pair's unshaped run, and against the planner's
  prediction from it (``workflows/grid/plan.py``: :func:`time_per_event_over_link`: bytes ÷ rate, less what
  the server's work on one request hides of the next one's upload, + one round trip per batch, shared by the
  streams, never faster than the busier direction's bytes ÷ rate). A loss point comes with its control: the
  same link without loss, with the MTU-sized packets loss needs;
* **jobs sharing one link** (``--share-jobs 1 2 4 8``): N ProtoDUNE jobs (one stream, ``--share-other-ms``
  of other work per event as sleep, so this machine's cores are not what saturates) over one link of
  ``--share-rate-mbit``: time per event against N, the knee measured (one job's time × the most events/s),
  predicted by ``sonic plan`` (its bounds; the link's: one job's time alone × rate ÷ the busier direction's
  bytes per event) and by ``sonic plan --simulate`` (``workflows/grid/simulate.py`` with the link) from the
  N=1 point.

``--quick`` runs a few points (about two minutes here). Results: ``network.md``, ``network.json``,
``network.png`` in ``--out``.

Examples::

    sonic bench network --quick
    sonic bench network --workflows miniaod --links "" rtt=10ms rtt=50ms rtt=100ms --streams 1 4 16
    sonic bench network --workflows protodune --links rate=1gbit rate=100mbit rate=100mbit,rtt=50ms --share-jobs
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ...framework import Output, Param, Producer
from ._report import BenchReport, header

#: workflow → (configuration, events of the sweep's input, generator seed); ProtoDUNE's events small-scale.
#: MiniAOD batches ~180 events at one stream and ~45 at four (``events_per_call`` auto): 1000 events give the
#: steady stretch at least two batches either way. ProtoDUNE's events differ (one to three requests each):
#: 40 keep one run's time per event within a few per cent of the next's
WORKFLOWS = {"miniaod": ("miniaod", 1000, 11), "protodune": ("protodune", 40, 21)}
#: --quick's events (MiniAOD: its four streams batch ~45 events, ten batches and more)
QUICK_EVENTS = {"miniaod": 600, "protodune": 10}
DEFAULT_LINKS = ["", "rtt=1ms", "rtt=10ms", "rtt=50ms", "rtt=100ms", "rate=10gbit", "rate=1gbit", "rate=100mbit",
                 "rate=1gbit,rtt=50ms", "rate=100mbit,rtt=50ms", "rtt=10ms,loss=0.1%", "rtt=10ms,loss=1%"]
#: --quick: per workflow, links and streams (MiniAOD at the configuration's streams; ProtoDUNE's bytes over a
#: narrow link), and two shared-link points
QUICK = {"miniaod": (["", "rtt=100ms"], [4]), "protodune": (["", "rate=100mbit,rtt=50ms"], [1]),
         "share_jobs": [1, 4], "share_events": 5, "share_other_ms": 1500.0}
SHARE_JOBS = [1, 2, 4, 6, 8, 10, 12]
#: keepalive_timeout_s of the shared-link jobs: longer than a request waits on the saturated link
KEEPALIVE_S = 120


# -- the job (a separate process, in the jobs' namespace) ---------------------------------------------------
class NetworkBenchClock(Producer):
    """Records when each batch of events has its results (the wall clock, the job's CPU, and the bytes its
    inference client has sent and received so far), for the steady per-event time and the bytes of exactly
    those events (events differ: ProtoDUNE's carry one to three requests); columnar, so it adds one call per
    batch and no per-event work."""

    columnar = True
    shared = True
    requires = ("inference",)
    trace = Param(str, "", doc="file for the batches' times (JSON), written at the end of the job")
    after = Param(list, [], doc="the workflow's results: the clock runs once they are made")
    stamp = Output("int: 0 for every event (kept so that the module is not pruned)")

    def consumes(self) -> list[str]:
        return [*super().consumes(), *self.after]

    def begin_job(self) -> None:
        self._calls: list[tuple[float, int, float]] = []
        self._lock = threading.Lock()

    def produce(self, events):
        models = self.services["inference"].client.statistics().get("models", {})
        sent = sum(m.get("bytes_sent", 0) for m in models.values())
        received = sum(m.get("bytes_received", 0) for m in models.values())
        with self._lock:
            self._calls.append((time.time(), len(events), time.process_time(), sent, received))
        events.put("stamp", np.zeros(len(events), dtype=np.int32))

    def end_job(self) -> None:
        if self.trace:
            Path(self.trace).write_text(json.dumps(self._calls))


def job_main(spec_path: str) -> int:
    """One job of the sweep, from its spec (JSON): the workflow's shipped configuration, direct or SONIC."""
    from ...framework import Process
    from ...framework import config as cfgmod

    spec = json.loads(Path(spec_path).read_text())
    overrides = [f"source.files=['{spec['input']}']", f"options.streams={spec['streams']}", "options.progress=false",
                 "output.file=null", f"services.inference.mode={spec['mode']}",
                 *([f"source.max_events={spec['max_events']}"] if spec.get("max_events") else []),
                 *([f"options.events_per_call={spec['events_per_call']}"] if spec.get("events_per_call") else [])]
    if spec["mode"] == "sonic":
        overrides += [f"services.inference.servers=['{spec['server']}']", "services.inference.fallback=false",
                      "services.inference.shared_memory='off'"]  # quoted: YAML reads off as false
    cfg = cfgmod.load(spec["config"], overrides)
    results = [product.split(" as ")[0].strip() for product in cfg.output.products]
    cfg.modules["clock"] = cfgmod.ModuleConfig("clock", f"{__name__}:NetworkBenchClock", {
        "trace": spec["trace"], "after": [key for key in results if ":" in key]})
    cfg.path = [*cfg.path, "clock"]
    cfg.output.products = [*cfg.output.products, "clock:stamp"]
    Process(cfg).run(timing_json=spec["timing"], progress=False)
    return 0


def steady_stretch(calls: list[list[float]], streams: int) -> tuple[list[float], list[float], int] | None:
    """The first and last batch completion of the steady stretch (:func:`steady_seconds_per_event`) and the
    events completed between them; None when there is none."""
    ordered = sorted(calls)
    first, last = streams - 1, len(ordered) - streams
    if last <= first:
        return None
    return ordered[first], ordered[last], sum(call[1] for call in ordered[first + 1:last + 1])


def steady_seconds_per_event(calls: list[list[float]], streams: int) -> float | None:
    """The time per event of a job's steady part, from its batches' completion times: the events of the
    batches completed between the end of the first wave (its ``streams`` first batches start together, with
    the job's start-up) and the last completion while every stream still had a batch (after it, the job
    drains), over that stretch. At both ends ``streams`` batches are in flight, so the work done before the
    stretch and after it is alike and the count is fair. None with fewer than ``2 × streams + 1`` batches
    (:func:`batches_needed`)."""
    stretch = steady_stretch(calls, streams)
    if stretch is None:
        return None
    start, end, events = stretch
    span = end[0] - start[0]
    return span / events if events and span > 0 else None


def batches_needed(streams: int) -> int:
    """Batches a job must have for :func:`steady_seconds_per_event` to see a stretch of two batches."""
    return 2 * streams + 2


# -- arguments ----------------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    quick = "; ".join(f"{w} links {QUICK[w][0]} streams {QUICK[w][1]}" for w in WORKFLOWS)
    parser.add_argument("--quick", action="store_true",
                        help=f"a few points ({quick}; jobs per link {QUICK['share_jobs']}, "
                             f"{QUICK['share_events']} events each)")
    parser.add_argument("--workflows", default="miniaod,protodune", help="comma-separated: miniaod, protodune")
    parser.add_argument("--links", nargs="*", default=None, metavar="LINK",
                        help="links of the sweep, each rate=...,rtt=...,jitter=...,loss=... (\"\": unshaped, always "
                             f"measured); default: {' '.join(repr(link) for link in DEFAULT_LINKS)}".replace("%", "%%"))
    parser.add_argument("--streams", type=int, nargs="+", default=None, help="streams settings (default: 1 4)")
    parser.add_argument("--events", type=int, default=None,
                        help=f"events per job (default: {', '.join(f'{w} {v[1]}' for w, v in WORKFLOWS.items())})")
    parser.add_argument("--events-per-call", type=int, default=None, metavar="N",
                        help="options.events_per_call of every job (default: the configuration's; 1 is CMSSW's one "
                             "event per module call: then the events in flight are the streams)")
    parser.add_argument("--no-direct", action="store_true", help="leave out the direct runs")
    parser.add_argument("--repeat", type=int, default=1, help="runs per point, interleaved (the median kept)")
    parser.add_argument("--share-jobs", type=int, nargs="*", default=None,
                        help=f"jobs sharing one link, ProtoDUNE (default: {' '.join(map(str, SHARE_JOBS))}; given "
                             f"without numbers: none)")
    parser.add_argument("--share-rate-mbit", type=float, default=25.0, help="the shared link's rate (Mb/s)")
    parser.add_argument("--share-other-ms", type=float, default=None,
                        help="each shared-link job's other work per event (sleep, ms; default 4000, --quick 1500): "
                             "with more, more jobs fit before the link saturates")
    parser.add_argument("--share-events", type=int, default=None, help="events per shared-link job (default: 12)")
    parser.add_argument("--point-timeout", type=float, default=600.0, help="seconds one job may take")


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The measurement's settings after --quick and the defaults: per workflow its links (the unshaped one
    first: every prediction starts from it) and streams; the shared-link job counts (with 1: the
    predictions start from it) and events."""
    workflows = [w.strip() for w in args.workflows.split(",") if w.strip()]
    unknown = [w for w in workflows if w not in WORKFLOWS]
    if unknown:
        raise SystemExit(f"sonic bench network: unknown workflow(s) {unknown}; choose from {sorted(WORKFLOWS)}")
    sweeps = {}
    for workflow in workflows:
        links = args.links if args.links is not None else (QUICK[workflow][0] if args.quick else DEFAULT_LINKS)
        streams = args.streams or (QUICK[workflow][1] if args.quick else [1, 4])
        sweeps[workflow] = (["", *(link for link in links if link != "")], sorted(set(streams)))
    share = args.share_jobs if args.share_jobs is not None else (QUICK["share_jobs"] if args.quick else SHARE_JOBS)
    return {"workflows": workflows, "sweeps": sweeps, "share_jobs": sorted({1, *share}) if share else [],
            "share_events": args.share_events or (QUICK["share_events"] if args.quick else 12),
            "share_other_ms": args.share_other_ms or (QUICK["share_other_ms"] if args.quick else 4000.0)}


def sample(out: Path, workflow: str, events: int) -> str:
    """The sweep's input: generated once per workflow and event count, reused by later runs (ProtoDUNE's
    events small-scale: full-scale events take seconds of CPU each here)."""
    _, _, seed = WORKFLOWS[workflow]
    if workflow == "protodune":
        path = out / f"protodune_small_{events}_{seed}.root"
        if not path.exists():
            from ...data.protodune.generate import generate

            generate(path, events, "small", seed=seed)
        return str(path.resolve())
    from ._samples import generated_input

    return str(Path(generated_input(out, workflow, events, seed)).resolve())


# -- one job in the lab -------------------------------------------------------------------------------------
def run_job(lab: Any, spec: dict[str, Any], folder: Path, timeout: float) -> dict[str, Any]:
    """Runs one sweep job in the lab's jobs namespace; returns its row (times per event in ms)."""
    from ..grid.plan import measure
    from ._load import process_tree_cpu

    folder.mkdir(parents=True, exist_ok=True)
    name = f"{spec['workflow']}_{spec['mode']}_s{spec['streams']}_{spec['point']}"
    spec = {**spec, "trace": str(folder / f"{name}.trace.json"), "timing": str(folder / f"{name}.timing.json")}
    (folder / f"{name}.spec.json").write_text(json.dumps(spec))
    pids = {"server": lab.server_pids()[-1] if spec["mode"] == "sonic" else None, "relay": lab.relay_pid()}
    before = {key: process_tree_cpu(pid) if pid else None for key, pid in pids.items()}
    result = lab.run(["python", "-m", __name__, str(folder / f"{name}.spec.json")], timeout=timeout)
    after = {key: process_tree_cpu(pid) if pid else None for key, pid in pids.items()}
    if result.returncode != 0:
        (folder / f"{name}.log").write_text(result.stdout + result.stderr)
        raise RuntimeError(f"job {name} failed ({result.returncode}): "
                           f"{(result.stderr.strip() or 'no output').splitlines()[-1]} (log {folder / name}.log)")
    report = json.loads(Path(spec["timing"]).read_text())
    calls = json.loads(Path(spec["trace"]).read_text())
    events = max(1, int(report["events"]))
    models = (report.get("inference") or {}).get("models", {})
    job_sent = sum(m.get("bytes_sent", 0) for m in models.values()) / events
    job_received = sum(m.get("bytes_received", 0) for m in models.values()) / events
    steady = steady_seconds_per_event(calls, spec["streams"])
    stretch = steady_stretch(calls, spec["streams"])
    sent, received = job_sent, job_received
    if stretch is not None and stretch[2]:  # the bytes of the very events the time per event is of
        start, end, inside = stretch
        sent, received = (end[3] - start[3]) / inside, (end[4] - start[4]) / inside
    cpu = {key: None if before[key] is None else 1000 * (after[key] - before[key]) / events for key in before}
    return {"workflow": spec["workflow"], "mode": spec["mode"], "streams": spec["streams"], "link": spec["link"],
            "relay": spec["relay"], **{k: spec[k] for k in ("rate_mbit", "rtt_ms", "loss", "measured_rtt_ms")},
            "events": events, "events_per_call": report.get("events_per_call"), "batches": len(calls),
            "steady": steady is not None,  # else too few batches: the whole job's time per event
            "event_ms": 1000 * steady if steady else 1000 * report["wall_s"] / events,
            "job_event_ms": 1000 * report["wall_s"] / events, "job_cpu_ms": 1000 * report["cpu_s"] / events,
            "server_cpu_ms": cpu["server"], "relay_cpu_ms": cpu["relay"],
            "bytes_sent_per_event": sent, "bytes_received_per_event": received,
            "job_bytes_sent_per_event": job_sent, "job_bytes_received_per_event": job_received,
            "requests_per_event": sum(m.get("requests", 0) for m in models.values()) / events,
            # the server's compute per event as Triton counts it (in the job's report)
            "server_s_per_event": measure([spec["timing"]]).server_s_per_event if spec["mode"] == "sonic" else None}


def sweep(lab: Any, workflow: str, links: list[str], streams: list[int], events: int, direct: bool, out: Path,
          timeout: float, repeat: int = 1, failures: dict[str, str] | None = None,
          events_per_call: int | None = None) -> list[dict[str, Any]]:
    """Every link × streams point of one workflow against one server in the lab, and the direct runs.

    Each link's runs come right after runs at the unshaped link (a pair per streams setting): on a shared
    machine the load drifts over minutes, and only runs close in time compare (:func:`sweep_predictions`
    uses each pair). ``repeat`` does all of it that many times; a point's row is its run of median time
    (:func:`median_runs`), the unshaped point's over every base run.
    """
    from ..netlab import Link

    config = WORKFLOWS[workflow][0]
    path = sample(out, workflow, events)
    folder = out / "jobs"
    rows: list[dict[str, Any]] = []
    base = {"workflow": workflow, "config": config, "input": path, "server": None, "rate_mbit": 0.0, "rtt_ms": 0.0,
            "loss": 0.0, "measured_rtt_ms": None, "relay": False, "link": "", "point": "direct",
            "events_per_call": events_per_call}
    lab.shape(Link())
    lab.start_server("--config", config)

    def run(link: Link, small: bool | None, point: str, **more: Any) -> dict[int, dict[str, Any]]:
        """The link's runs, one per streams setting, keyed by it."""
        lab.shape(link, small_packets=small)
        done = {}
        for s in streams:
            spec = {**base, "mode": "sonic", "streams": s, "server": lab.grpc_addresses[-1],
                    "link": link.describe() + (CONTROL if small and not link.loss else ""),
                    "rate_mbit": link.rate_mbit, "rtt_ms": link.rtt_ms, "loss": link.loss,
                    "small_packets": bool(small or link.loss), "measured_rtt_ms": lab.measured_rtt_ms,
                    "relay": lab.uses_relay, "point": point}
            if attempt(rows, failures, lab, spec, folder, timeout):
                done[s] = rows[-1]
                print(f"{workflow} sonic, {link.describe()}, {s} stream(s): {rows[-1]['event_ms']:.2f} ms/event "
                      f"(RTT measured {lab.measured_rtt_ms:.2f} ms)", flush=True)
        return done

    others = [(text, small) for text, small in with_control(links) if text or small]
    # the server's first executions (sessions, caches) belong to no point
    attempt([], failures, lab, {**base, "mode": "sonic", "streams": streams[0], "server": lab.grpc_addresses[-1],
                                "point": "warmup", "max_events": min(events, 200), "relay": lab.uses_relay},
            folder, timeout)
    for r in range(repeat):
        if direct:
            lab.shape(Link())
            for s in streams:
                if attempt(rows, failures, lab, {**base, "mode": "direct", "streams": s, "point": f"direct_r{r}"},
                           folder, timeout):
                    print(f"{workflow} direct, {s} stream(s): {rows[-1]['event_ms']:.2f} ms/event", flush=True)
        for k, (text, small) in enumerate(others or [("", None)]):
            bases = run(Link(), None, f"base{k}_r{r}")
            if not others:
                break
            alone = bases.get(min(streams))
            for s, row in run(Link.parse(text), small, f"link{k}_r{r}").items():
                if s in bases:
                    row["base_ms"] = bases[s]["event_ms"]
                    row["base_alone_ms"] = (alone or bases[s])["event_ms"] if min(streams) == 1 else None
    return median_runs(rows)


def attempt(rows: list[dict[str, Any]], failures: dict[str, str] | None, lab: Any, spec: dict[str, Any], folder: Path,
            timeout: float) -> bool:
    """Runs one job and appends its row; a job that fails is recorded in ``failures`` (the bench goes on and
    reports it) unless ``failures`` is None, when it raises."""
    try:
        rows.append(run_job(lab, spec, folder, timeout))
        return True
    except (RuntimeError, subprocess.TimeoutExpired) as err:
        if failures is None:
            raise
        key = f"{spec['workflow']} {spec['mode']}, {spec['link'] or 'no link'}, {spec['streams']} stream(s), {spec['point']}"
        failures[key] = str(err).splitlines()[0]
        print(f"{key}: FAILED {failures[key]}", flush=True)
        return False


#: the label of a loss point's control: the same link without loss, TCP sending MTU-sized packets as with loss
CONTROL = ", MTU-sized packets"


def with_control(links: list[str]) -> list[tuple[str, bool | None]]:
    """The links to measure, each with its packets' size (None: the lab's choice); with loss points, their
    control comes right after the first of them: the same link without loss and with MTU-sized packets
    (what the lab needs for loss costs CPU a real NIC's offload saves; the loss costs the rest)."""
    from ..netlab import Link

    out: list[tuple[str, bool | None]] = [(text, None) for text in links]
    lossy = [text for text in links if Link.parse(text).loss]
    if lossy:
        link = Link.parse(lossy[0])
        control = ",".join(f"{key}={value}" for key, value in (("rate", f"{link.rate_mbit:g}mbit" if link.rate_mbit else ""),
                                                               ("rtt", f"{link.rtt_ms:g}ms" if link.rtt_ms else "")) if value)
        out.insert(links.index(lossy[0]) + 1, (control, True))
    return out


def small_packets(row: dict[str, Any]) -> bool:
    """Whether a row was measured with MTU-sized packets: a loss point, or its control."""
    return bool(row["loss"] or row["link"].endswith(CONTROL))


def median_runs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per point (workflow, mode, streams, link, relay): the run of median time per event, with every
    run's time in ``repeats_ms``."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["workflow"], row["mode"], row["streams"], row["link"], row["relay"]), []).append(row)
    out = []
    for runs in groups.values():
        ordered = sorted(runs, key=lambda r: r["event_ms"])
        out.append({**ordered[(len(ordered) - 1) // 2], "repeats_ms": [r["event_ms"] for r in runs],
                    "pairs": [[r["event_ms"], r["base_ms"], r.get("base_alone_ms")] for r in runs if "base_ms" in r]})
    return out


def relay_cost(lab: Any, workflow: str, streams: list[int], events: int, out: Path, timeout: float,
               failures: dict[str, str] | None = None, events_per_call: int | None = None) -> list[dict[str, Any]]:
    """The relay's own cost per event: for each streams setting, SONIC at the unshaped link with the relay in
    the path and, right after, without it (``base_ms`` of the second is the first's time)."""
    from ..netlab import Link

    config = WORKFLOWS[workflow][0]
    path = sample(out, workflow, events)
    rows: list[dict[str, Any]] = []
    for s in streams:
        relayed: list[dict[str, Any]] = []
        for mode, target, label in ((True, relayed, "unshaped, relayed (pair)"), (None, rows, "unshaped, no relay")):
            lab.relay_mode = mode  # None: the unshaped link needs no relay, which leaves the path
            lab.shape(Link())
            spec = {"workflow": workflow, "config": config, "input": path, "mode": "sonic", "streams": s,
                    "server": lab.grpc_addresses[-1], "link": label, "rate_mbit": 0.0, "rtt_ms": 0.0,
                    "loss": 0.0, "measured_rtt_ms": lab.measured_rtt_ms, "relay": lab.uses_relay, "point": "relaycost",
                    "events_per_call": events_per_call}
            attempt(target, failures, lab, spec, out / "jobs", timeout)
        if relayed and rows and rows[-1]["streams"] == s:
            rows[-1].update(base_ms=relayed[0]["event_ms"], relay_cpu_ms=relayed[0]["relay_cpu_ms"])
    lab.relay_mode = True
    return median_runs(rows)


# -- jobs sharing one link ----------------------------------------------------------------------------------
def share_point(lab: Any, jobs: int, spec: dict[str, Any], folder: Path, timeout: float) -> dict[str, Any]:
    """``jobs`` ProtoDUNE jobs (``scale.job_main``: one stream, other work as sleep, a barrier so that they
    run together) over the lab's link; their time per event in the stretch where all ran, events/s, bytes."""
    from ..grid.plan import measure
    from ._load import process_tree_cpu

    folder = folder / f"n{jobs}"
    folder.mkdir(parents=True, exist_ok=True)
    go = folder / "go"
    processes, traces, timings = [], [], []
    server_pid = lab.server_pids()[-1]
    for k in range(jobs):
        mine = {**spec, "trace": str(folder / f"trace{k}.json"), "go": str(go), "timing": str(folder / f"timing{k}.json")}
        (folder / f"spec{k}.json").write_text(json.dumps(mine))
        traces.append(Path(mine["trace"]))
        timings.append(Path(mine["timing"]))
        log = open(folder / f"job{k}.log", "w")  # noqa: SIM115 - closed when the job ends
        processes.append((lab.popen(["python", "-m", "sonic_hep.workflows.bench.scale", str(folder / f"spec{k}.json")],
                                    stdout=log, stderr=subprocess.STDOUT), log))
    deadline = time.monotonic() + timeout
    try:
        while sum(Path(f"{t}.ready").exists() for t in traces) < jobs:
            if any(p.poll() not in (None, 0) for p, _ in processes) or time.monotonic() > deadline:
                raise RuntimeError(f"a shared-link job failed or did not start: see {folder}/job*.log")
            time.sleep(0.05)
        server_cpu = process_tree_cpu(server_pid)
        go.touch()
        for process, _ in processes:
            process.wait(max(1.0, deadline - time.monotonic()))
        server_cpu = process_tree_cpu(server_pid) - server_cpu
    finally:
        for process, log in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()
    failed = [k for k, (p, _) in enumerate(processes) if p.returncode != 0]
    if failed:
        raise RuntimeError(f"shared-link job {failed[0]} exited with {processes[failed[0]][0].returncode}: "
                           f"see {folder}/job{failed[0]}.log")
    warm = spec["warmup"]
    stamps = [json.loads(t.read_text())["wall"] for t in traces]
    cpu = [json.loads(t.read_text())["cpu"] for t in traces]
    completions = [s[warm + 1:] for s in stamps]
    first, last = max(c[0] for c in completions), min(c[-1] for c in completions)
    durations = [b - a for s in stamps for a, b in zip(s[warm:], s[warm + 1:]) if first <= b <= last] or \
        [b - a for s in stamps for a, b in zip(s[warm:], s[warm + 1:])]
    # events/s while every job ran, by the closed-loop law: N jobs each taking the mean time per event (a rate
    # read from the few completions a short stretch holds would depend on where the stretch cuts them)
    rate = jobs / float(np.mean(durations))
    measured = measure(timings)
    events = measured.events
    # requests resent after their connection was called dead (each one's bytes crossed the link again)
    failovers = sum(m.get("failovers", 0) for t in timings
                    for m in json.loads(t.read_text())["inference"]["models"].values())
    job_cpu = [(c[-1] - c[warm]) / (len(c) - 1 - warm) for c in cpu if len(c) > warm + 1]
    return {"jobs": jobs, "servers": 1, "events": events, "time_per_event_median": statistics.median(durations),
            "time_per_event_mean": statistics.fmean(durations),
            "time_per_event_p90": float(np.percentile(durations, 90)), "events_per_s": rate,
            "bytes_per_event": measured.bytes_per_event, "sent_fraction": measured.sent_fraction,
            "other_s_per_event": measured.other_s_per_event, "server_compute_s_per_event": measured.server_s_per_event,
            "requests_per_event": sum(measured.requests_per_event.values()),
            "job_cpu_s_per_event": statistics.median(job_cpu) if job_cpu else measured.cpu_s_per_event,
            "server_cpu_s_per_event": server_cpu / max(1, events),
            "wire_mb_per_s": (measured.bytes_per_event or 0.0) * rate / 1e6, "failovers": failovers}


def share_sweep(lab: Any, jobs: list[int], rate_mbit: float, other_ms: float, events: int, out: Path,
                timeout: float) -> list[dict[str, Any]]:
    """The shared-link points: a ProtoDUNE server, the link at ``rate_mbit``, N jobs at a time."""
    from ...framework.inference import resolve_repository
    from ..netlab import Link

    warmup = 1  # the server is warm; events differ in size, so each one left out skews the bytes per event
    path = sample(out, "protodune", events)
    lab.stop_servers()
    lab.shape(Link(rate_mbit=rate_mbit))
    server = lab.start_server("--config", "protodune")
    # a request waits behind the other jobs' bytes on a saturated link, its connection silent meanwhile: the
    # client's keepalive (3 s + 3 s by default) would call it dead, resend it and so add bytes (docs/network.md)
    spec = {"workflow": "protodune", "input": path, "events": events, "servers": [server],
            "repository": resolve_repository("data/models/protodune"), "shared_memory": "off", "other_ms": other_ms,
            "other_kind": "sleep", "warmup": warmup, "overrides": [f"services.inference.keepalive_timeout_s={KEEPALIVE_S}"]}
    points = []
    for n in jobs:
        points.append(share_point(lab, n, spec, out / "share", timeout))
        p = points[-1]
        print(f"shared {Link(rate_mbit=rate_mbit).describe()} link, {n} job(s): {p['time_per_event_mean']:.3f} s/event, "
              f"{p['events_per_s']:.2f} events/s, {p['wire_mb_per_s']:.2f} MB/s", flush=True)
    return points


def share_prediction(points: list[dict[str, Any]], rate_mbit: float, cores: int, events: int) -> dict[str, Any]:
    """The knee as ``sonic plan`` predicts it (its bounds, the link's among them) and as its simulation draws
    it, from the one-job point; the measured knee with the same construction."""
    from ..grid.plan import plan, predicted_time_per_event
    from ..grid.simulate import Scenario, from_measurement, simulate
    from .scale import measured_knee

    base = next(p for p in points if p["jobs"] == 1)
    # means throughout: events differ (one to three requests each) and bytes per event are a mean too
    alone = base["time_per_event_mean"]
    other = min(base["other_s_per_event"], alone)
    # the server's compute per event as Triton counts it (its CPU time also counts onnxruntime's threads
    # spinning between requests); on the host's cores the server costs its CPU
    server = base["server_compute_s_per_event"] or base["server_cpu_s_per_event"]
    host_cpu = base["job_cpu_s_per_event"] + base["server_cpu_s_per_event"]
    result = plan(other, server, base["bytes_per_event"], rate_mbit / 1000, latency_s_per_event=alone - other,
                  cores=cores, host_cpu_s_per_event=host_cpu, sent_fraction=base["sent_fraction"])
    # simulated as the scale benchmark does: the CPU server executes on the jobs' cores, its CPU per event its work
    service = base["server_cpu_s_per_event"]
    settings = from_measurement(other, service, base["requests_per_event"], base["bytes_per_event"],
                                base["sent_fraction"] or 1.0, link_gbps=rate_mbit / 1000, cores=cores,
                                server_on_cores=True, events=max(events, 12), warmup=2)
    # one simulated job alone takes the measured time: t_other is what is left of it after the server and the wire
    wire = base["bytes_per_event"] / (rate_mbit * 1e6 / 8)
    settings["other_s"] = max(alone - service - wire, base["job_cpu_s_per_event"])
    settings["cpu_s"] = min(base["job_cpu_s_per_event"], settings["other_s"])
    # the simulation overlaps an event's requests on the wire with the server's work on the ones arrived: what it
    # then takes for one job alone is set right once more
    lone = simulate(Scenario(jobs=1, **settings)).time_per_event_median
    settings["other_s"] = max(base["job_cpu_s_per_event"], settings["other_s"] + alone - lone)
    settings["cpu_s"] = min(base["job_cpu_s_per_event"], settings["other_s"])
    simulated = []
    for p in points:
        sim = simulate(Scenario(jobs=p["jobs"], **settings))
        p["simulated_time_per_event"] = sim.time_per_event_median
        p["simulated_events_per_s"] = sim.events_per_s
        link_s = p["jobs"] * max(base["sent_fraction"] or 1.0, 1 - (base["sent_fraction"] or 1.0)) * \
            base["bytes_per_event"] / (rate_mbit * 1e6 / 8)
        p["predicted_time_per_event"] = max(float(predicted_time_per_event(p["jobs"], other, alone - other, server, 1,
                                                                           host_cpu, cores)), link_s)
        simulated.append({"jobs": p["jobs"], "servers": 1, "time_per_event_median": sim.time_per_event_median,
                          "events_per_s": sim.events_per_s})
    top = max(p["events_per_s"] for p in points)
    measured = {"flat_s": alone, "max_events_per_s": top, "knee_jobs": alone * top,
                "saturated": max(points, key=lambda p: p["jobs"])["time_per_event_mean"] > 1.2 * alone}
    sim_knee = measured_knee(simulated, 1)  # the same construction as scale's (its times are the simulated ones)
    return {"alone_s": alone, "t_other_s": other, "server_s_per_event": server, "host_cpu_s_per_event": host_cpu,
            "bytes_per_event": base["bytes_per_event"], "sent_fraction": base["sent_fraction"], "cores": cores,
            "rate_mbit": rate_mbit, "link_knee_jobs": result.link_knee_jobs, "host_knee_jobs": result.host_knee_jobs,
            "server_knee_jobs": result.knee_jobs_per_server, "predicted_knee_jobs": result.knee_jobs,
            "bound": result.bound, "simulated_knee_jobs": sim_knee["knee_jobs"], "measured": measured,
            "simulation_settings": settings}


# -- predictions of the sweep -------------------------------------------------------------------------------
def sweep_predictions(rows: list[dict[str, Any]]) -> None:
    """Sets each relayed SONIC row's ``predicted_ms`` (:func:`time_per_event_over_link` from the unshaped run
    just before it with the same streams, and the one-stream one for one event alone: its bytes, its requests
    and the server's compute, its link, one round trip per batch, as the planner assumes for requests sent
    together), ``prediction_error`` and ``vs_unshaped`` (its time ÷ that run's), each the median over its
    pairs."""
    from ..grid.plan import time_per_event_over_link

    for row in rows:
        if row["mode"] != "sonic" or not row["relay"]:
            continue
        if row["link"] == "unshaped":
            row.update(vs_unshaped=1.0, predicted_ms=row["event_ms"], prediction_error=0.0)
            continue
        if not row.get("pairs"):
            continue
        per_call = row.get("events_per_call") or 1
        row["events_in_flight"] = row["streams"] * per_call
        # a batch's requests go together: the server computes one while the next is on the wire
        requests = max(1.0, row["requests_per_event"] * per_call)
        predicted = [1000 * time_per_event_over_link(base / 1000, row["bytes_sent_per_event"],
                                                     row["bytes_received_per_event"], row["rate_mbit"],
                                                     row["rtt_ms"] / 1000, 1.0 / per_call, in_flight=row["streams"],
                                                     alone_s=(alone or base) / 1000, requests=requests,
                                                     server_s=row.get("server_s_per_event") or 0.0)
                     for _, base, alone in row["pairs"]]
        row["vs_unshaped"] = statistics.median(run / base for run, base, _ in row["pairs"])
        row["predicted_ms"] = statistics.median(predicted)
        row["prediction_error"] = statistics.median(p / run - 1 for p, (run, _, _) in zip(predicted, row["pairs"]))


def round_trips(rows: list[dict[str, Any]], workflow: str) -> float | None:
    """Round trips one batch waits in turn, measured: from the one-stream points at a round trip and no rate
    limit, (each run's time per event − its unshaped pair's) × events per batch ÷ RTT (median); None without
    such points. The planner assumes 1 (a batch's requests sent together)."""
    found = [(run - base) * (r.get("events_per_call") or 1) / r["rtt_ms"] for r in rows
             if r["workflow"] == workflow and r["mode"] == "sonic" and r["streams"] == 1 and r["rtt_ms"] >= 10
             and not r["rate_mbit"] and not r["loss"] for run, base, _ in r.get("pairs", [])]
    return statistics.median(found) if found else None


def _point(rows: list[dict[str, Any]], workflow: str, streams: int, link: str) -> dict[str, Any] | None:
    return next((r for r in rows if r["workflow"] == workflow and r["mode"] == "sonic" and r["streams"] == streams
                 and r["link"] == link and r["relay"]), None)



# -- the page -----------------------------------------------------------------------------------------------
def _f(value: Any, digits: int = 1, suffix: str = "") -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}{suffix}"


def hidden_rtt_ms(row: dict[str, Any], rows: list[dict[str, Any]], tolerance: float = 0.05) -> float | None:
    """The round trip a SONIC setting hides within ``tolerance`` by the planner's model: one batch's time alone
    (bytes over the rate included) shared by its streams stays under the unshaped time per event × (1 +
    tolerance) up to RTT = events per call × (streams × that − one event alone − its bytes' time)."""
    base = _point(rows, row["workflow"], row["streams"], "unshaped")
    alone = _point(rows, row["workflow"], 1, "unshaped") or base
    if base is None:
        return None
    rate = row["rate_mbit"] * 1e6 / 8
    wire = (row["bytes_sent_per_event"] + row["bytes_received_per_event"]) / rate * 1000 if rate else 0.0
    room = row["streams"] * base["event_ms"] * (1 + tolerance) - alone["event_ms"] - wire
    return max(0.0, room * (row.get("events_per_call") or 1))


def goals(report: dict[str, Any]) -> list[str]:
    """The issue's three goals, each with its figure and whether it is met."""
    rows, lines = report["rows"], []
    streams = report.get("configured_streams", {}).get("miniaod")
    far = [r for r in rows if r["workflow"] == "miniaod" and r["mode"] == "sonic" and r["streams"] == streams
           and r["rtt_ms"] == 100 and not r["rate_mbit"] and not r["loss"] and r.get("vs_unshaped")]
    if far:
        ratio, pairs = far[0]["vs_unshaped"], [run / base for run, base, _ in far[0].get("pairs", [])]
        spread = f" (median of {len(pairs)} pairs, {min(pairs):.3f} to {max(pairs):.3f})" if len(pairs) > 1 else ""
        lines.append(f"- MiniAOD, {streams} streams (the configuration's), RTT 100 ms: SONIC ×{ratio:.3f} of its time at "
                     f"the unshaped link run just before{spread} — {'met' if ratio <= 1.05 else 'NOT met'} (goal: "
                     f"within 5 %); the model says this setting hides up to {_f(hidden_rtt_ms(far[0], rows), 0)} ms")
    for streams in sorted({r["streams"] for r in rows if r["workflow"] == "protodune"}):
        # the plan has no loss in it: its points (and their control) are the loss section's
        errors = [r["prediction_error"] for r in rows if r["workflow"] == "protodune" and "prediction_error" in r
                  and r["streams"] == streams and r["link"] != "unshaped" and not small_packets(r)]
        if errors:
            worst = max(errors, key=abs)
            within = sum(abs(e) <= 0.20 for e in errors)
            lines.append(f"- ProtoDUNE, {streams} stream(s): time per event against the unshaped time + bytes ÷ rate + "
                         f"RTT, as `sonic plan` predicts it: errors {100 * min(errors):+.0f} % to {100 * max(errors):+.0f} "
                         f"% over {len(errors)} links, {within} within 20 % — "
                         f"{'met' if abs(worst) <= 0.20 else 'NOT met'} (goal: within 20 %)")
    share = report.get("share_prediction")
    bound = (share or {}).get("bound")
    if share and share.get("measured"):
        measured = share["measured"]["knee_jobs"]
        for name, key in (("`sonic plan`", "predicted_knee_jobs"), ("`sonic plan --simulate`", "simulated_knee_jobs")):
            predicted = share.get(key)
            if predicted:
                error = predicted / measured - 1
                lines.append(f"- {len(report['share'])} job counts on one {share['rate_mbit']:g} Mb/s link: knee measured "
                             f"{measured:.1f} jobs{'' if share['measured']['saturated'] else ' (not saturated: a lower bound)'}, "
                             f"{name} {predicted:.1f}{f' ({bound} bound)' if key == 'predicted_knee_jobs' else ''} — "
                             f"{error * 100:+.0f} %, {'met' if abs(error) <= 0.20 else 'NOT met'} (goal: within 20 %)")
    return lines


def markdown(report: dict[str, Any]) -> str:
    lab = report["lab"]
    lines = header("sonic bench network", report,
                   f"Lab: server and jobs in two network namespaces, one veth pair; rate and loss shaped in the kernel "
                   f"(htb, a BPF classifier dropping at random); delay {'netem' if lab['netem'] else 'a user-space relay'} "
                   f"in the path at every point; bare veth RTT {_f(lab['base_rtt_ms'], 3)} ms, through the idle relay "
                   f"{_f(lab['relay_base_rtt_ms'], 3)} ms (taken off every delay asked of it)",
                   f"Jobs: the shipped configurations (events per call: "
                   f"{report['arguments'].get('events_per_call') or 'as configured'}), SONIC with shared memory off; "
                   f"{report['repeat']} run(s) per point, "
                   f"interleaved, the run of median time kept; per-event time: the steady batches (every stream busy)")
    lines += ["## Goals", "", *goals(report), ""]
    for point, problem in report.get("failures", {}).items():
        lines.append(f"- FAILED: {point}: {problem}")
    rows = report["rows"]
    for workflow in report["workflows"]:
        mine = [r for r in rows if r["workflow"] == workflow]
        direct = {r["streams"]: r for r in mine if r["mode"] == "direct"}
        lines += [f"## {workflow}", "", "| link | RTT measured ms | streams | events/call | SONIC ms/event | ÷ unshaped | "
                  "predicted ms/event | error | direct ms/event | SONIC ÷ direct | MB/event sent · received | "
                  "CPU ms/event job · server · relay | RTT hidden (model) ms |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in sorted((r for r in mine if r["mode"] == "sonic"), key=lambda r: r["streams"]):  # links as swept
            d = direct.get(r["streams"])
            lines.append(
                f"| {r['link']} | {_f(r['measured_rtt_ms'], 2)} | {r['streams']} | {r.get('events_per_call')} | "
                f"{r['event_ms']:.2f}{'' if r.get('steady', True) else ' (whole job)'} | {_f(r.get('vs_unshaped'), 3)} | {_f(r.get('predicted_ms'), 2)} | "
                f"{_f(100 * r['prediction_error'] if 'prediction_error' in r else None, 0, ' %')} | "
                f"{_f(d['event_ms'] if d else None, 2)} | {_f(r['event_ms'] / d['event_ms'] if d else None, 2)} | "
                f"{r['bytes_sent_per_event'] / 1e6:.3f} · {r['bytes_received_per_event'] / 1e6:.4f} | "
                f"{r['job_cpu_ms']:.1f} · {_f(r['server_cpu_ms'])} · {_f(r['relay_cpu_ms'], 2)} | "
                f"{_f(hidden_rtt_ms(r, rows) if r['relay'] else None, 0)} |")
        rounds = report["round_trips"].get(workflow)
        lines += ["", "SONIC ms/event: the run of median time per event; ÷ unshaped, predicted and error: medians over "
                  "the point's pairs (each run against the unshaped run right before it; error = predicted ÷ measured "
                  "− 1); RTT hidden: what the model says this setting hides within 5 % (events per call × (streams × "
                  "unshaped time − one event alone − its bytes' time))."]
        lines += ["", f"Round trips one batch waits in turn, measured at one stream: {_f(rounds, 2)} "
                  f"(the prediction assumes 1: a batch's requests sent together)."]
        for lossy in (r for r in mine if r["mode"] == "sonic" and r["loss"]):
            control = next((r for r in mine if r["link"].endswith(CONTROL) and r["streams"] == lossy["streams"]
                            and r["rtt_ms"] == lossy["rtt_ms"] and r["rate_mbit"] == lossy["rate_mbit"]), None)
            if control:
                lines.append(f"Loss {100 * lossy['loss']:g} %, {lossy['streams']} stream(s): ×{lossy['event_ms'] / control['event_ms']:.2f} "
                             f"of the same link without loss, both with MTU-sized packets ({control['event_ms']:.2f} ms/event)")
        for bare in (r for r in mine if r["link"] == "unshaped, no relay" and r.get("pairs")):
            relayed = bare["pairs"][0][1]
            lines.append(f"Relay cost, {bare['streams']} stream(s): {relayed:.2f} ms/event through the idle relay vs "
                         f"{bare['event_ms']:.2f} right after without it ({relayed / bare['event_ms']:.3f}×; the relay's "
                         f"CPU {_f(bare.get('relay_cpu_ms'), 2)} ms/event on these cores)")
        lines.append("")
    if report.get("share"):
        pred = report["share_prediction"]
        lines += [f"## Jobs sharing one {pred['rate_mbit']:g} Mb/s link (ProtoDUNE, one stream each, "
                  f"{report['share_other_ms']:g} ms of other work per event as sleep)", "",
                  "| jobs | s/event mean | median | p90 | events/s | MB/s on the link | requests resent | "
                  "predicted s/event | simulated s/event |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for p in report["share"]:
            lines.append(f"| {p['jobs']} | {p['time_per_event_mean']:.3f} | {p['time_per_event_median']:.3f} | "
                         f"{p['time_per_event_p90']:.3f} | "
                         f"{p['events_per_s']:.2f} | {p['wire_mb_per_s']:.2f} | {p.get('failovers', '–')} | "
                         f"{_f(p.get('predicted_time_per_event'), 3)} | {_f(p.get('simulated_time_per_event'), 3)} |")
        lines += ["", f"One job alone {pred['alone_s']:.3f} s/event, {pred['bytes_per_event'] / 1e6:.2f} MB/event "
                  f"({100 * (pred['sent_fraction'] or 1):.1f} % sent); `sonic plan` bounds: link "
                  f"{_f(pred['link_knee_jobs'])} jobs, host ({pred['cores']} cores, {1000 * pred['host_cpu_s_per_event']:.0f} "
                  f"ms CPU per event) {_f(pred['host_knee_jobs'])}, server {_f(pred['server_knee_jobs'])}; "
                  f"simulated knee {_f(pred['simulated_knee_jobs'])}; measured {pred['measured']['knee_jobs']:.1f} "
                  f"({pred['measured']['flat_s']:.3f} s/event × {pred['measured']['max_events_per_s']:.2f} events/s at most).", ""]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    """The papers' style: time per event against RTT, rate and loss per workflow and streams (measured
    points, the planner's prediction dashed, direct dotted), and against jobs sharing a link."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["rows"] if r["relay"] or r["mode"] == "direct"]
    sonic = [r for r in rows if r["mode"] == "sonic"]
    # (x, label, which points, what splits them into lines): a line per workflow and streams (and round trip)
    panels = [("rtt_ms", "round trip (ms)", lambda r: not r["rate_mbit"] and not small_packets(r), ()),
              ("rate_mbit", "link rate (Mb/s)", lambda r: r["rate_mbit"] and not small_packets(r), ("rtt_ms",)),
              ("loss", "packet loss (%), RTT 10 ms, MTU-sized packets",
               lambda r: r["rtt_ms"] == 10 and not r["rate_mbit"] and small_packets(r), ())]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    colours = [f"C{k}" for k in range(10)]
    for ax, (key, label, chosen, split) in zip(axes.flat, panels):
        lines = sorted({(r["workflow"], r["streams"], *(r[k] for k in split)) for r in sonic if chosen(r)})
        for index, line in enumerate(lines):
            colour = colours[index % len(colours)]
            mine = sorted((r for r in sonic if chosen(r) and (r["workflow"], r["streams"], *(r[k] for k in split)) == line),
                          key=lambda r: r[key])
            x = [100 * r[key] if key == "loss" else r[key] for r in mine]
            name = f"{line[0]}, {line[1]} stream(s)" + (f", RTT {line[2]:g} ms" if split else "")
            ax.plot(x, [r["event_ms"] for r in mine], "o-", color=colour, label=name)
            if key != "loss":  # the plan has no loss in it
                ax.plot(x, [r.get("predicted_ms", math.nan) for r in mine], "--", color=colour, alpha=0.7)
            direct = next((r for r in rows if r["workflow"] == line[0] and r["streams"] == line[1]
                           and r["mode"] == "direct"), None)
            if direct:
                ax.axhline(direct["event_ms"], color=colour, linestyle=":", alpha=0.8)
        ax.set_xlabel(label)
        ax.set_ylabel("time per event (ms)")
        if not lines:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
            continue
        ax.set_yscale("log")
        if key == "rate_mbit":
            ax.set_xscale("log")
        elif key == "rtt_ms":
            ax.set_xscale("symlog", linthresh=1)
            ax.set_xlim(left=0)
        ax.legend(fontsize=7, title="measured (o), sonic plan (--), direct (:)", title_fontsize=7)
    ax = axes.flat[3]
    share = report.get("share") or []
    if share:
        pred = report["share_prediction"]
        n = [p["jobs"] for p in share]
        ax.plot(n, [p["time_per_event_mean"] for p in share], "o-", color="#228833", label="measured (mean)")
        ax.plot(n, [p["predicted_time_per_event"] for p in share], "--", color="#228833", alpha=0.7, label="sonic plan")
        ax.plot(n, [p["simulated_time_per_event"] for p in share], "x", color="#228833", label="sonic plan --simulate")
        ax.axvline(pred["measured"]["knee_jobs"], color="#228833", alpha=0.3, linewidth=4, label="measured knee")
        if pred.get("predicted_knee_jobs"):
            ax.axvline(pred["predicted_knee_jobs"], color="#228833", linestyle=":",
                       label=f"predicted knee ({pred['bound']} bound)")
        ax.set_xlabel(f"jobs sharing one {pred['rate_mbit']:g} Mb/s link")
        ax.set_ylabel("time per event (s)")
        ax.set_ylim(0, None)
        ax.legend(fontsize=7)
    else:
        ax.set_axis_off()
    fig.suptitle("SONIC over a shaped link: time per event (network lab)")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    from ...framework import config as cfgmod
    from ..cli.run import stop_on_signals
    from ..netlab import NetworkLab
    from ._machine import describe_load, load_average

    chosen = settings(args)
    bench = BenchReport.start("network", args.out)
    out = bench.out
    load_before = load_average()
    rows: list[dict[str, Any]] = []
    share: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    # SIGTERM (a batch system's, `timeout`'s) ends the bench as Ctrl-C does: the lab is taken down on the way out
    with stop_on_signals(), NetworkLab(relay=True) as lab:
        for workflow in chosen["workflows"]:
            links, streams = chosen["sweeps"][workflow]
            events = args.events or (QUICK_EVENTS if args.quick else {w: v[1] for w, v in WORKFLOWS.items()})[workflow]
            rows += sweep(lab, workflow, links, streams, events, not args.no_direct, out, args.point_timeout,
                          args.repeat, failures, args.events_per_call)
            rows += relay_cost(lab, workflow, streams, events, out, args.point_timeout, failures, args.events_per_call)
            lab.stop_servers()
        if chosen["share_jobs"]:
            try:
                share = share_sweep(lab, chosen["share_jobs"], args.share_rate_mbit, chosen["share_other_ms"],
                                    chosen["share_events"], out, args.point_timeout)
            except RuntimeError as err:
                failures["shared link"] = str(err)
        described = lab.describe()
    sweep_predictions(rows)
    report: dict[str, Any] = {
        **bench.fields(), "load": describe_load(load_before, load_average()), "lab": described,
        "arguments": {k: v for k, v in vars(args).items() if not callable(v)}, "workflows": chosen["workflows"],
        "repeat": args.repeat, "rows": rows,
        "configured_streams": {w: cfgmod.load(WORKFLOWS[w][0]).options.streams for w in chosen["workflows"]},
        "round_trips": {w: round_trips(rows, w) for w in chosen["workflows"]}, "share": share, "failures": failures,
        "share_other_ms": chosen["share_other_ms"]}
    if len(share) > 1:
        import os

        report["share_prediction"] = share_prediction(share, args.share_rate_mbit, len(os.sched_getaffinity(0)),
                                                      chosen["share_events"])
    bench.write(markdown(report), report, {"network.png": lambda figure: plot(report, figure)}, indent=1)
    return 1 if failures else 0


def redraw(path: str) -> None:
    """Recomputes the predictions, the page and the figure of a saved ``network.json`` in place (after the
    analysis changed, or for results measured elsewhere): ``python -m sonic_hep.workflows.bench.network
    --redraw network.json``."""
    saved = Path(path)
    report = json.loads(saved.read_text())
    sweep_predictions(report["rows"])
    report["round_trips"] = {w: round_trips(report["rows"], w) for w in report["workflows"]}
    if len(report.get("share") or []) > 1:
        report["share_prediction"] = share_prediction(report["share"], report["arguments"]["share_rate_mbit"],
                                                      report["share_prediction"]["cores"],
                                                      max(p["events"] // p["jobs"] for p in report["share"]))
    bench = BenchReport("network", saved.parent, report["machine"], report["command"], report.get("date", ""),
                        saved.stem)
    bench.write(markdown(report), report, {f"{saved.stem}.png": lambda figure: plot(report, figure)}, indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "--redraw":
        redraw(sys.argv[2])
        sys.exit(0)
    sys.exit(job_main(sys.argv[1]))
