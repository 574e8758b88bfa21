"""ProtoDUNE through several GPU servers of one machine: events/s with 1, 2, 4 ... servers, each on its own cards.

The shipped GPU entry (``data/models/protodune_gpu``: 16 ``KIND_GPU`` instances) is served by as many local
Triton servers as the largest ``--servers``, started together, server ``k`` on the ``k``-th slice of the cards
this process may use (``gpus`` of the server options; one server per card where there are as many). For each
count S of ``--servers``, S × ``--clients-per-server`` client processes run the job's own request path
(``EmTrkMichelId``'s: each event's patches cut into ``--batch-size`` requests, all in flight, in system shared
memory) against the first S servers, started together behind a barrier, events back to back for ``--seconds``.
Measured at each point, over the stretch in which every client runs:

* events/s of all clients, and against one server (the scaling);
* each server's share of the requests, from the servers' own statistics (Triton's request counts);
* each card's busy % and memory (``nvidia-smi``, every 0.5 s), so that a card left idle shows.

Then, with ``--kill-events N``: every server, S × ``--clients-per-server`` clients of N events each; the last
server is killed (SIGKILL, as a crash) ``--kill-after`` seconds into the run. Every client must finish every
event, each event's scores complete and equal to that client's own first answer for the event (within
``--tolerance``), and the other servers take the killed one's share (their statistics before and after).

Results: ``multi_gpu.md``, ``multi_gpu.json``, ``multi_gpu.png`` in ``--out``. ``--device cpu`` dry-runs every
step without a GPU (CPU servers, small events).

Examples::

    sonic bench multi-gpu --servers 1 2 4 --clients-per-server 16 --seconds 10 --kill-events 30
    sonic bench multi-gpu --device cpu --scale small --events 2 --servers 1 2 --clients-per-server 2 \\
        --seconds 3 --kill-events 6 --kill-after 1     # dry run
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ...framework.paths import MODELS
from ._report import BenchReport, header
from .scale import GpuSampler

MODEL = "emtrkmichelid"
REPOSITORY = MODELS / "protodune_gpu"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", help="ProtoDUNE ROOT file (default: generate --events events)")
    parser.add_argument("--scale", choices=("full", "small"), default="full", help="scale of generated events")
    parser.add_argument("--events", type=int, default=2, help="events to generate and cycle through")
    parser.add_argument("--seed", type=int, default=21, help="generator seed")
    parser.add_argument("--batch-size", type=int, default=1693, help="patches per request the clients send")
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 2, 4], help="numbers of servers measured")
    parser.add_argument("--clients-per-server", type=int, default=16, help="client processes per server in use")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per point")
    parser.add_argument("--kill-events", type=int, default=0,
                        help="events per client of the run in which one server is killed (0: no such run)")
    parser.add_argument("--kill-after", type=float, default=4.0, help="seconds into that run the last server dies")
    parser.add_argument("--tolerance", type=float, default=5e-3,
                        help="max |Δ| of a score against the client's first answer for the same event")
    parser.add_argument("--python-shm-mb", type=int, default=256, help="each python stub's shared-memory pool")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu",
                        help="the servers' device (cpu: a dry run without a GPU)")


# -- a client process ------------------------------------------------------------------------------------
def _outputs_problem(got: dict[str, np.ndarray], expected: dict[str, np.ndarray], rows: int, tolerance: float) -> str:
    """Why an event's scores are not the event's ("" when they are): rows missing, non-finite, or moved."""
    for name, values in expected.items():
        answer = got.get(name)
        if answer is None or len(answer) != rows:
            return f"{name}: {0 if answer is None else len(answer)} rows of {rows}"
        if not np.all(np.isfinite(answer)):
            return f"{name}: not finite"
        if rows and float(np.max(np.abs(answer - values))) > tolerance:
            return f"{name}: max |Δ| {float(np.max(np.abs(answer - values))):.1e} against the first answer"
    return ""


def client_main(spec_path: str) -> int:
    """One client process (``python -m sonic_hep.workflows.bench.multi_gpu SPEC``): warm-up, barrier, events."""
    from ...framework.inference import InferenceConfig, make_client
    from .protodune import run_event

    spec = json.loads(Path(spec_path).read_text())
    events = [np.load(path) for path in spec["events"]]
    client = make_client(InferenceConfig(mode="sonic", repository=[spec["repository"]], servers=spec["urls"],
                                         fallback=False, shared_memory="on", timeout_s=300))
    result: dict[str, Any] = {"events": 0, "lost": 0, "wrong": 0, "problems": [], "stamps": []}
    try:
        expected = [run_event(client, patches, spec["batch_size"]) for patches in events]  # also the warm-up
        Path(spec["ready"]).touch()
        deadline = time.monotonic() + 900
        while not Path(spec["go"]).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        start, n = time.perf_counter(), 0
        while (n < spec["count"]) if spec["count"] else (time.perf_counter() - start < spec["seconds"]):
            patches = events[n % len(events)]
            try:
                got = run_event(client, patches, spec["batch_size"])
                problem = _outputs_problem(got, expected[n % len(events)], len(patches), spec["tolerance"])
            except Exception as err:  # noqa: BLE001 - a lost event is counted and said, the client goes on
                result["lost"] += 1
                problem = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            else:
                result["wrong" if problem else "events"] += 1
            if problem and len(result["problems"]) < 5:
                result["problems"].append(problem)
            result["stamps"].append(time.time())
            n += 1
        result["seconds"] = time.perf_counter() - start
        result["out_of_rotation"] = client.pool.breaker_openings()
        result["answers"] = {address: int(count) for model in client.counters.as_dict().values()
                             for address, count in (model.get("answers") or {}).items()}
    finally:
        client.close()
        Path(spec["result"]).write_text(json.dumps(result))
    return 0


# -- measuring ---------------------------------------------------------------------------------------------
def requests_by_server(urls: list[str], errors: dict[str, str] | None = None) -> list[float]:
    """Each server's count of answered requests of the model (Triton's statistics); NaN for one not answering
    (why, in ``errors``)."""
    from .scale import server_statistics

    out = []
    for url in urls:
        try:
            out.append(float(server_statistics([url])[0].get(MODEL, {}).get("requests", 0)))
        except Exception as err:  # noqa: BLE001 - a killed server: its count is gone with it
            out.append(float("nan"))
            if errors is not None:
                errors[url] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return out


def run_clients(count: int, urls: list[str], args: argparse.Namespace, events: list[Path], folder: Path,
                events_each: int = 0, during: Any = None, seconds: float | None = None) -> dict[str, Any]:
    """``count`` client processes against ``urls`` started together (for ``--seconds``, or ``events_each``
    events each); ``during(go_time)`` runs in this process once they are released. Their results and the
    servers' request counts over the window in which every client ran."""
    import psutil

    seconds = args.seconds if seconds is None else seconds
    folder.mkdir(parents=True, exist_ok=True)
    go = folder / "go"
    unreadable: dict[str, str] = {}
    procs, results = [], []
    for k in range(count):
        spec = {"urls": urls, "repository": str(REPOSITORY), "batch_size": args.batch_size,
                "events": [str(p) for p in events], "ready": str(folder / f"ready{k}"), "go": str(go),
                "result": str(folder / f"result{k}.json"), "seconds": seconds, "count": events_each,
                "tolerance": args.tolerance}
        (folder / f"spec{k}.json").write_text(json.dumps(spec))
        log = open(folder / f"client{k}.log", "w")  # noqa: SIM115 - closed below
        procs.append((subprocess.Popen([sys.executable, "-m", __name__, str(folder / f"spec{k}.json")], stdout=log,
                                       stderr=subprocess.STDOUT), log))
    try:
        deadline = time.monotonic() + 600
        while sum((folder / f"ready{k}").exists() for k in range(count)) < count:
            if time.monotonic() > deadline or any(p.poll() is not None for p, _ in procs):
                raise RuntimeError(f"a client did not start: see {folder}/client*.log")
            time.sleep(0.05)
        with GpuSampler() as cards:
            go.touch()
            started = time.time()
            outcome = during(started) if during else None
            warm = min(1.0, seconds / 4)
            time.sleep(warm if not events_each else 0)  # past the clients' first requests
            cpu_before = psutil.cpu_times()
            before, t0 = requests_by_server(urls, unreadable), time.time()
            if not events_each:
                time.sleep(max(0.5, seconds - 2 * warm))
                after, t1 = requests_by_server(urls, unreadable), time.time()
                cpu_after = psutil.cpu_times()
            for p, _ in procs:  # a client that hangs fails the point instead of the whole run
                p.wait(seconds + 240)
            if events_each:
                after, t1 = requests_by_server(urls, unreadable), time.time()
                cpu_after = psutil.cpu_times()
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            log.close()
    for k in range(count):
        path = folder / f"result{k}.json"
        results.append(json.loads(path.read_text()) if path.exists() else {"events": 0, "lost": -1, "problems":
                                                                            ["no result: see its log"]})
    window = [s for r in results for s in r.get("stamps", [])]
    # events finished while every client ran (after the first second: connections, caches), per second; a
    # run of a fixed number of events each: all of them over the whole run
    first_end = min((r["stamps"][-1] for r in results if r.get("stamps")), default=started)
    begin, end = (started, max(window, default=started)) if events_each else (started + warm, first_end)
    rate = sum(begin < s <= end for s in window) / (end - begin) if end > begin else 0.0
    served = [b - a for a, b in zip(before, after)]
    return {"clients": count, "servers": len(urls), "events_per_s": rate, "events": sum(r["events"] for r in results),
            "lost": sum(max(0, r["lost"]) for r in results), "wrong": sum(r.get("wrong", 0) for r in results),
            "no_result": sum(r["lost"] < 0 for r in results), "problems": [p for r in results for p in r["problems"]][:10],
            "server_requests": served, "server_share": _shares(served), "requests_at_start": before,
            "cards": cards.over(t0, t1), "cpu_busy_cores": _busy_cores(cpu_before, cpu_after, t1 - t0),
            "unreadable_servers": unreadable,
            "out_of_rotation": _summed([r.get("out_of_rotation") or {} for r in results]),
            "client_answers": _summed([r.get("answers") or {} for r in results]),
            "window_s": t1 - t0, "outcome": outcome, "stamps": sorted(window), "started": started}


def _busy_cores(before: Any, after: Any, seconds: float) -> float:
    """Cores busy on average between two ``psutil.cpu_times()`` (the host: clients, servers, everything)."""
    def busy(times: Any) -> float:  # guest time is already part of user time
        return sum(v for k, v in times._asdict().items() if k not in ("idle", "iowait", "guest", "guest_nice"))

    return max(0.0, (busy(after) - busy(before)) / seconds) if seconds > 0 else 0.0


def _summed(counts: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in counts:
        for key, value in item.items():
            out[key] = out.get(key, 0) + int(value)
    return out


def _shares(counts: list[float]) -> list[float]:
    total = sum(c for c in counts if not math.isnan(c))
    return [c / total if total and not math.isnan(c) else float("nan") for c in counts]


def start_servers(count: int, args: argparse.Namespace, workdir: Path) -> list[Any]:
    """``count`` servers of the shipped GPU entry started together, each on its own slice of the cards."""
    from ...framework.inference.serving import TritonServer, available_cards, node_shares

    cards = available_cards() if args.device == "gpu" else []
    shares, note = node_shares(count, cards) if cards else ([None] * count, "")
    if note:
        print(f"note: {note}", flush=True)
    servers = [TritonServer([REPOSITORY], device=args.device, python_shm_mb=args.python_shm_mb, gpus=gpus,
                            workdir=workdir / f"server{k}", startup_timeout=600) for k, gpus in enumerate(shares)]
    with ThreadPoolExecutor(count) as pool:
        list(pool.map(lambda s: s.start(), servers))
    for server in servers:
        print(f"server {server.grpc_url}: cards {server.gpu_cards}, instances {server.gpu_instances}", flush=True)
    return servers


def check_alive(servers: list[Any], failures: dict[str, str]) -> list[bool]:
    """Whether each server still runs; a dead one's exit code and log tail go to ``failures``."""
    alive = [server.alive() for server in servers]
    for server, live in zip(servers, alive):
        if not live and f"server {server.grpc_url}" not in failures:
            failures[f"server {server.grpc_url}"] = (f"exited with {server.process.returncode if server.process else '?'}"
                                                     f"; log: {server.log_tail(30)}")
    return alive


def stop_servers(servers: list[Any]) -> None:
    with ThreadPoolExecutor(max(1, len(servers))) as pool:  # a GPU server may take its whole grace period to stop
        list(pool.map(lambda s: s.stop(timeout=10), servers))


def kill_run(servers: list[Any], args: argparse.Namespace, events: list[Path], folder: Path) -> dict[str, Any]:
    """Every server, a fixed number of events per client; the last server killed ``--kill-after`` s in."""
    victim = servers[-1]
    urls = [s.grpc_url for s in servers]
    marks: dict[str, Any] = {}

    def kill_later(go_time: float) -> dict[str, Any]:
        def act() -> None:
            time.sleep(max(0.0, go_time + args.kill_after - time.time()))
            marks["requests_at_kill"] = requests_by_server(urls)
            marks["killed_at"] = time.time()
            victim.kill()
        marks["thread"] = threading.Thread(target=act, daemon=True)
        marks["thread"].start()
        return {"killed": victim.grpc_url}

    point = run_clients(len(servers) * args.clients_per_server, urls, args, events, folder, args.kill_events, kill_later)
    marks.pop("thread").join(60)
    # the survivors' requests from the kill to the end: the killed server's share went to them
    at_kill = marks.get("requests_at_kill") or [float("nan")] * len(urls)
    point["requests_before_kill"] = [k - s for k, s in zip(at_kill, point["requests_at_start"])]
    point["share_before_kill"] = _shares(point["requests_before_kill"])
    point["requests_after_kill"] = [e - a for e, a in zip(requests_by_server(urls[:-1]), at_kill[:-1])]
    point["share_after_kill"] = _shares(point["requests_after_kill"])
    point["killed_at_s"] = marks.get("killed_at", float("nan")) - point["started"]
    point["expected_events"] = len(servers) * args.clients_per_server * args.kill_events
    return point


# -- report ------------------------------------------------------------------------------------------------
def deviation(shares: list[float]) -> float:
    """The largest relative deviation of a share from even (0.05: 5 %)."""
    valid = [x for x in shares if not math.isnan(x)]
    return max((abs(x * len(valid) - 1) for x in valid), default=float("nan"))


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """The figures the goals are judged by: scaling against one server, balance, and the kill run's events."""
    points = {p["servers"]: p for p in report["points"]}
    one = points.get(1, {}).get("events_per_s") or float("nan")
    out: dict[str, Any] = {"speedup": {s: p["events_per_s"] / one for s, p in points.items()},
                           "balance": {s: deviation(p["server_share"]) for s, p in points.items() if s > 1}}
    kill = report.get("kill")
    if kill:
        out["kill"] = {"expected_events": kill["expected_events"], "events": kill["events"], "lost": kill["lost"],
                       "wrong": kill["wrong"], "clients_without_result": kill["no_result"],
                       "balance_after_kill": deviation(kill["share_after_kill"])}
    return out


def markdown(report: dict[str, Any]) -> str:
    args = report["arguments"]
    lines = header("sonic bench multi-gpu: ProtoDUNE through several GPU servers of one machine", report,
                   f"Events: {report['patches_per_event']:.0f} patches per event ({report['mb_per_event']:.0f} MB of "
                   f"uint8), requests of {args['batch_size']} patches; {args['clients_per_server']} client processes "
                   f"per server in use; each server on its own cards (the shipped entry: {report['instances']})",
                   f"Cards this process could use: {', '.join(report['cards']) or 'none (CPU servers)'}")
    lines += ["| servers | clients | events/s | × one server | share per server (server statistics) | deviation "
              "| GPU busy % per card | GPU memory GiB per card | host cores busy |",
              "|---:|---:|---:|---:|---|---:|---|---|---:|"]
    speedup = report["summary"]["speedup"]
    for p in report["points"]:
        busy = " ".join(f"{card}: {v['busy_percent']:.0f}" for card, v in p["cards"].items()) or "—"
        memory = " ".join(f"{card}: {v['memory_mib'] / 1024:.1f}" for card, v in p["cards"].items()) or "—"
        shares = " ".join(f"{x:.3f}" for x in p["server_share"])
        lines.append(f"| {p['servers']} | {p['clients']} | {p['events_per_s']:.1f} | {speedup[p['servers']]:.2f} | "
                     f"{shares} | {100 * deviation(p['server_share']):.1f} % | {busy} | {memory} | "
                     f"{p.get('cpu_busy_cores', float('nan')):.1f} of {report.get('host_cores', '?')} |")
    for p in report["points"]:
        if p.get("unreadable_servers") or p.get("out_of_rotation"):
            lines.append(f"\n{p['servers']} server(s): statistics unreadable {p.get('unreadable_servers')}; "
                         f"servers out of the clients' rotation (times) {p.get('out_of_rotation')}")
        if p["lost"] or p["wrong"] or p["no_result"]:
            lines.append(f"\n{p['servers']} server(s): {p['lost']} events lost, {p['wrong']} wrong, "
                         f"{p['no_result']} clients without a result: {p['problems']}")
    kill = report.get("kill")
    if kill:
        lines += ["", f"## One server killed {kill['killed_at_s']:.1f} s into a run of {kill['clients']} clients × "
                      f"{args['kill_events']} events ({kill['outcome']['killed']})", "",
                  f"- events finished with complete scores equal to the client's first answer: {kill['events']} of "
                  f"{kill['expected_events']}; lost {kill['lost']}, wrong {kill['wrong']}, clients without a result "
                  f"{kill['no_result']}" + (f" ({kill['problems']})" if kill["problems"] else ""),
                  f"- requests per server before the kill: {' '.join(f'{x:.0f}' for x in kill['requests_before_kill'])} "
                  f"(shares {' '.join(f'{x:.3f}' for x in kill['share_before_kill'])})",
                  f"- after the kill, the survivors: {' '.join(f'{x:.0f}' for x in kill['requests_after_kill'])} "
                  f"(shares {' '.join(f'{x:.3f}' for x in kill['share_after_kill'])}, deviation "
                  f"{100 * deviation(kill['share_after_kill']):.1f} %)",
                  f"- events/s over the run: {kill['events_per_s']:.1f}"]
    if report["failures"]:
        lines += ["", "## Failures", ""] + [f"- {k}: {v}" for k, v in report["failures"].items()]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(15, 4.2))
    points = report["points"]
    counts = [p["servers"] for p in points]
    rates = [p["events_per_s"] for p in points]
    ax.plot(counts, rates, "o-", label="measured")
    if points and points[0]["servers"] == 1:
        ax.plot(counts, [rates[0] * c for c in counts], "--", color="grey", label="one server × servers")
    ax.set(xlabel="servers (one per card)", ylabel="events/s (all clients)", title="ProtoDUNE events/s", ylim=(0, None))
    ax.set_xticks(counts)
    ax.legend(fontsize=8)
    for index, p in enumerate(points):
        cards = list(p["cards"].items())
        bx.bar([i + 0.8 * index / max(1, len(points)) for i in range(len(cards))], [v["busy_percent"] for _, v in cards],
               width=0.8 / max(1, len(points)), label=f"{p['servers']} server(s)")
        bx.set_xticks(range(len(cards)), [c for c, _ in cards])
    bx.set(xlabel="card", ylabel="busy % (nvidia-smi)", title="GPU busy per card", ylim=(0, 105))
    bx.legend(fontsize=8)
    kill = report.get("kill")
    if kill and kill["stamps"]:
        stamps = np.array(kill["stamps"]) - kill["started"]
        edges = np.arange(0, max(stamps) + 0.5, 0.5)
        counts_per_bin, _ = np.histogram(stamps, edges)
        cx.step(edges[:-1], counts_per_bin / 0.5, where="post")
        cx.axvline(kill["killed_at_s"], color="red", linestyle=":", label="server killed")
        cx.set(xlabel="seconds", ylabel="events/s", title="one server killed mid-run", ylim=(0, None))
        cx.legend(fontsize=8)
    else:
        cx.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    from ...framework.inference import ModelRepository
    from ...framework.inference.serving import available_cards
    from .gpu import event_patches

    if min(args.servers) < 1 or args.clients_per_server < 1 or args.seconds <= 0 or args.kill_events < 0:
        raise SystemExit("sonic bench multi-gpu: --servers and --clients-per-server must be ≥ 1, --seconds > 0")
    if args.kill_events and max(args.servers) < 2:
        raise SystemExit("sonic bench multi-gpu: --kill-events needs at least 2 servers (one dies, one serves)")
    bench = BenchReport.start("multi-gpu", args.out)
    workdir = Path(tempfile.mkdtemp(prefix="sonic-bench-multi-gpu-"))
    failures: dict[str, str] = {}
    points: list[dict[str, Any]] = []
    kill = None
    patches = event_patches(args, workdir)
    events = []
    for i, event in enumerate(patches):
        np.save(workdir / f"event{i}.npy", event)
        events.append(workdir / f"event{i}.npy")
    servers = start_servers(max(args.servers), args, workdir)
    try:
        # every server warm before any point (its instances' first executions set up the device: a cold server
        # is slow for seconds, and each event's requests wait for the slowest server they went to)
        warm = run_clients(len(servers) * args.clients_per_server, [s.grpc_url for s in servers], args, events,
                           workdir / "warm", seconds=min(args.seconds, 6.0))
        print(f"warm-up: {warm['events_per_s']:.1f} events/s, shares {[round(x, 3) for x in warm['server_share']]}",
              flush=True)
        for count in sorted(set(args.servers)):
            try:
                point = run_clients(count * args.clients_per_server, [s.grpc_url for s in servers[:count]], args,
                                    events, workdir / f"point{count}")
            except Exception as err:  # noqa: BLE001 - a failed point is reported, the others kept
                failures[f"{count} servers"] = f"{type(err).__name__}: {err}"
                continue
            point["servers_alive"] = check_alive(servers[:count], failures)
            points.append(point)
            print(f"{count} server(s), {point['clients']} clients: {point['events_per_s']:.1f} events/s, shares "
                  f"{[round(x, 3) for x in point['server_share']]}, cards "
                  f"{ {c: round(v['busy_percent']) for c, v in point['cards'].items()} }", flush=True)
        if args.kill_events:
            try:
                kill = kill_run(servers, args, events, workdir / "kill")
                kill["servers_alive"] = check_alive(servers[:-1], failures)
                print(f"kill: {kill['events']} of {kill['expected_events']} events, lost {kill['lost']}, wrong "
                      f"{kill['wrong']}, shares after {[round(x, 3) for x in kill['share_after_kill']]}", flush=True)
            except Exception as err:  # noqa: BLE001
                failures["kill run"] = f"{type(err).__name__}: {err}"
    finally:
        stop_servers(servers)
    groups = ModelRepository([REPOSITORY]).get(MODEL).config_dict.get("instance_group") or []
    report = {**bench.fields(), "arguments": {k: v for k, v in vars(args).items() if not callable(v)},
              "cards": available_cards() if args.device == "gpu" else [], "host_cores": os.cpu_count(),
              "instances": ", ".join(f"{g.get('count', 1)} {g.get('kind', 'KIND_AUTO')}" for g in groups),
              "patches_per_event": float(np.mean([len(p) for p in patches])),
              "mb_per_event": float(np.mean([p.nbytes for p in patches])) / 1e6,
              "points": points, "kill": kill, "failures": failures}
    report["summary"] = summary(report)
    if kill and (kill["lost"] or kill["wrong"] or kill["no_result"] or kill["events"] != kill["expected_events"]):
        failures["kill run events"] = f"{kill['events']} of {kill['expected_events']} events complete"
    bench.write(markdown(report), report, {"multi_gpu.png": lambda path: plot(report, path)}, indent=1)
    import shutil

    shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(client_main(sys.argv[1]))
