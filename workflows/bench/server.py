"""The Triton server itself, under load from a C load generator: requests/s, server CPU per request, latency.

``sonic bench inference`` loads the server from Python, and on a small machine a Python client costs
more CPU per request than the server does: it measures itself. Here the load comes from ``h2load``
(Debian ``nghttp2-client``) replaying one prepared gRPC body (``_grpc_bodies.py``), a few microseconds
of CPU per request, so what is measured is the server::

    sonic bench server                                        # demo_mlp and ParticleNet AK4, both backends
    sonic bench server --models demo_mlp --backends native --in-flight 1 64 --rounds 1

For every model × backend (python-based or native onnxruntime) × dynamic batching (off / on, a runtime
copy of the model's config with the ``dynamic_batching`` block removed or kept) × requests in flight
(h2load connections × streams per connection), ``--rounds`` rounds each of a fixed number of requests
(never a duration: Triton 2.51 can crash when a client cancels requests in flight, which is what
h2load does when its time is up). The count is chosen from a warm-up run so that a round lasts about
``--seconds``. Per round:

* requests/s: requests ÷ h2load's own elapsed time;
* server CPU µs per request: user + system time of the server process and its children (the
  python-based backend runs models in stub processes) read from /proc before and after, ÷ requests;
* latency p50 / p99: h2load's per-request log (``--log-file``: time to the end of each response);
* the server's statistics before and after: the success count must grow by exactly the number of
  requests and the failure count not at all. h2load counts HTTP 200 as success even when the gRPC
  status in the trailers is an error, so its own counts prove nothing. Each body is also sent once
  through a Python gRPC stub first, so a bad body fails with the server's own message.

The table gives the median of the rounds. Models: ``demo_mlp`` (16 → 32 → 4 MLP, one row per request)
and ``miniaod_particlenet_ak4`` (one jet per request at CMS's maximum lengths: 50 particles, 5
secondary vertices). Results: ``server.md``, ``server.json``, ``server.png`` in ``--out``.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...framework.inference import ModelInfo, ModelRepository
from ...framework.inference.serving import write_entry
from ...framework.inference.serving import TritonServer
from ...framework.inference import resolve_repository
from ._grpc_bodies import GRPC_HEADERS, INFER_PATH, body, unframe
from ._load import process_tree_cpu
from ._machine import CoreSplit
from ._report import BenchReport, header

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Case:
    """A model under test: where it is and what one request carries."""

    repository: str
    model: str
    #: length of each variable (-1) dimension, by input-name prefix
    lengths: tuple[tuple[str, int], ...] = ()
    rows: int = 1

    def inputs(self, seed: int = 3) -> dict[str, np.ndarray]:
        """One request's inputs: ``rows`` rows, variable dimensions at ``lengths``, random values."""
        rng = np.random.default_rng(seed)
        arrays = {}
        for spec in self.info().inputs:
            length = next((n for prefix, n in self.lengths if spec.name.startswith(prefix)), None)
            if any(d < 0 for d in spec.dims) and length is None:
                raise SystemExit(f"sonic bench server: input {spec.name!r} of {self.model} has a variable dimension "
                                 "and the benchmark gives it no length")
            shape = [self.rows, *(length if d < 0 else d for d in spec.dims)]
            arrays[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
        return arrays

    def info(self) -> ModelInfo:
        """The model's entry in the project's repository."""
        return ModelRepository([resolve_repository(self.repository)]).get(self.model)


#: the benchmark's models, by the name used on the command line
CASES = {
    "demo_mlp": Case("data/models/demo", "demo_mlp"),
    # one jet at CMS's maximum lengths (preprocess.json of ParticleNetAK4: pf 8..50, sv 1..5)
    "particlenet_ak4": Case("data/models/miniaod", "miniaod_particlenet_ak4", (("pf_", 50), ("sv_", 5))),
}
BACKENDS = ("python", "native")
BATCHING = {"off": "unbatched", "on": "batched"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", nargs="+", default=list(CASES), choices=list(CASES), help="models to load")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS,
                        help="onnxruntime backends: python-based (model.py in the stub) and native (C++)")
    parser.add_argument("--batching", nargs="+", default=["off", "on"], choices=list(BATCHING),
                        help="dynamic batching off (one execution per request) and/or on")
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 4, 16, 64],
                        help="requests in flight (h2load connections × streams per connection)")
    parser.add_argument("--connections", type=int, default=1, help="h2load connections (at most)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per point; the table gives their median")
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="about how long a round lasts (its request count is chosen from a warm-up run)")
    parser.add_argument("--min-requests", type=int, default=200, help="fewest requests in a round")
    parser.add_argument("--max-requests", type=int, default=200_000, help="most requests in a round")
    CoreSplit.add_arguments(parser, "h2load")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 and 16 in flight, one short round")


# -- the server's models ---------------------------------------------------------------------------------
def variant_name(model: str, batching: str) -> str:
    return f"{model}_{BATCHING[batching]}"


def write_variants(cases: list[Case], batching: list[str], dest: Path) -> ModelRepository:
    """A repository of runtime copies of each model, one per batching setting: the model's own files
    (linked) and its config with ``dynamic_batching`` removed (off) or kept, an empty one added if it had
    none (on). Checksums stay in the config: the server verifies them as for the original."""
    for case in cases:
        info = case.info()
        for setting in batching:
            name = variant_name(case.model, setting)
            config = type(info.config)()
            config.CopyFrom(info.config)
            config.name = name
            if setting == "off":
                config.ClearField("dynamic_batching")
            elif not config.HasField("dynamic_batching"):
                config.dynamic_batching.SetInParent()
            write_entry(info, dest / name, config)
    return ModelRepository([dest])


def start_server(repository: ModelRepository, backend: str, workdir: Path, cpus: list[int] | None) -> TritonServer:
    """A server of ``repository`` whose onnxruntime models run on ``backend`` (python-based or native)."""
    return TritonServer(repository, backend=backend, workdir=workdir, cpus=cpus).start()


def served_backend(server: TritonServer, model: str) -> str:
    """What the server says serves ``model`` ("onnxruntime (native)", "onnxruntime (python-based)")."""
    return server.model_backends.get(model, "?")


# -- one measurement ------------------------------------------------------------------------------------
def h2load_program() -> str:
    program = shutil.which("h2load")
    if program is None:
        raise SystemExit("sonic bench server needs h2load: apt-get install nghttp2-client")
    return program


def split_in_flight(in_flight: int, connections: int) -> tuple[int, int]:
    """(connections, streams per connection) giving ``in_flight`` requests in flight, rounded up."""
    clients = max(1, min(connections, in_flight))
    return clients, math.ceil(in_flight / clients)


def run_h2load(url: str, body_file: Path, requests: int, clients: int, streams: int, log_file: Path,
               headers: tuple[str, ...] = ()) -> dict[str, Any]:
    """One h2load run of ``requests`` posts of the prepared body (with ``headers`` beside gRPC's own, e.g. an
    ``authorization`` a proxy checks); its counts, elapsed time, per-request times (µs) and its own CPU time."""
    cmd = [h2load_program(), "-n", str(requests), "-c", str(clients), "-m", str(streams), "-t", "1",
           f"--data={body_file}", f"--log-file={log_file}"]
    for grpc_header in (*GRPC_HEADERS, *headers):
        cmd += ["-H", grpc_header]
    cmd.append(f"http://{url}{INFER_PATH}")
    log_file.unlink(missing_ok=True)  # h2load appends to an existing log
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = result.stdout
    done = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                     r"(\d+) errored", out)
    finished = re.search(r"finished in ([\d.]+)(us|ms|s),", out)
    if result.returncode != 0 or done is None or finished is None:
        raise SystemExit(f"sonic bench server: h2load failed (exit {result.returncode}): "
                         f"{(result.stderr or out).strip().splitlines()[-1:] or ['no output']}")
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0}[finished.group(2)]
    times = np.loadtxt(log_file, usecols=2, ndmin=1, dtype=np.float64) if log_file.stat().st_size else np.zeros(0)
    if len(times) != requests:
        raise SystemExit(f"sonic bench server: h2load logged {len(times)} of {requests} requests in {log_file}")
    return {"succeeded": int(done.group(4)), "failed": int(done.group(5)) + int(done.group(6)),
            "elapsed_s": float(finished.group(1)) * scale, "request_us": times,
            "h2load_cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


def model_counts(server: TritonServer, model: str) -> dict[str, int]:
    """Cumulative success / failure / execution counts of ``model`` from the server's statistics API."""
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(server.grpc_url) as control:
        stats = control.get_inference_statistics(model).model_stats[0]
    return {"success": stats.inference_stats.success.count, "fail": stats.inference_stats.fail.count,
            "executions": stats.execution_count}


def check_body(server: TritonServer, framed: bytes, model: str) -> None:
    """Sends the body's message once through a Python gRPC stub: a body the server refuses fails here with the
    server's own message, before h2load (which sees only HTTP 200) replays it."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    request = service_pb2.ModelInferRequest.FromString(unframe(framed))
    with grpc.insecure_channel(server.grpc_url) as channel:
        try:
            response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=60)
        except grpc.RpcError as err:
            raise SystemExit(f"sonic bench server: {model} refuses the prepared request: {err.code().name}: "
                             f"{err.details()}") from None
    if not response.outputs or len(response.raw_output_contents) != len(response.outputs):
        raise SystemExit(f"sonic bench server: {model} answered the prepared request without outputs")


def measure(server: TritonServer, model: str, body_file: Path, requests: int, in_flight: int, connections: int,
            scratch: Path) -> dict[str, Any]:
    """One round: ``requests`` requests with ``in_flight`` in flight; rates, CPU, latency, checked counts."""
    clients, streams = split_in_flight(in_flight, connections)
    requests = max(requests, clients)
    before, cpu = model_counts(server, model), process_tree_cpu(server.pid)
    run = run_h2load(server.grpc_url, body_file, requests, clients, streams, scratch / "h2load.log")
    cpu, after = process_tree_cpu(server.pid) - cpu, model_counts(server, model)
    success, fail = after["success"] - before["success"], after["fail"] - before["fail"]
    if success != requests or fail or run["failed"]:
        raise SystemExit(f"sonic bench server: {model}: {requests} requests sent, the server counted {success} "
                         f"successes and {fail} failures (h2load: {run['succeeded']} succeeded, {run['failed']} failed)")
    executions = after["executions"] - before["executions"]
    times = run["request_us"]
    return {"requests": requests, "clients": clients, "streams": streams, "in_flight": clients * streams,
            "requests_per_s": requests / run["elapsed_s"], "elapsed_s": run["elapsed_s"],
            "server_cpu_us_per_request": 1e6 * cpu / requests,
            "h2load_cpu_us_per_request": 1e6 * run["h2load_cpu_s"] / requests,
            "latency_ms_p50": float(np.percentile(times, 50)) / 1000 if len(times) else float("nan"),
            "latency_ms_p99": float(np.percentile(times, 99)) / 1000 if len(times) else float("nan"),
            "server_success": success, "server_fail": fail, "executions": executions,
            "avg_batch": requests / max(1, executions)}


def point(server: TritonServer, model: str, body_file: Path, in_flight: int, args: argparse.Namespace,
          scratch: Path) -> dict[str, Any]:
    """A warm-up run sizes the rounds (about ``--seconds`` each); the medians of the rounds, and the rounds."""
    warm = measure(server, model, body_file, max(args.min_requests, 20 * in_flight), in_flight, args.connections,
                   scratch)
    requests = int(min(args.max_requests, max(args.min_requests, warm["requests_per_s"] * args.seconds)))
    rounds = [measure(server, model, body_file, requests, in_flight, args.connections, scratch)
              for _ in range(args.rounds)]
    keys = ("requests_per_s", "server_cpu_us_per_request", "h2load_cpu_us_per_request", "latency_ms_p50",
            "latency_ms_p99", "avg_batch")
    summary = {k: statistics.median(r[k] for r in rounds) for k in keys}
    first = rounds[0]
    return {"in_flight": first["in_flight"], "clients": first["clients"], "streams": first["streams"],
            "requests": requests, **summary, "server_success": sum(r["server_success"] for r in rounds),
            "requests_sent": sum(r["requests"] for r in rounds), "rounds": rounds}


def bench_backend(backend: str, cases: list[Case], args: argparse.Namespace, tmp: Path, cores: CoreSplit) -> list[dict]:
    """Every point of one backend, against one server serving every model variant."""
    repository = write_variants(cases, args.batching, tmp / f"models-{backend}")
    rows = []
    os.sched_setaffinity(0, cores.all_cpus)  # a server's cores must be this process's; h2load gets the others
    server = start_server(repository, backend, tmp / f"server-{backend}", cores.server_cpus)
    cores.pin_clients()
    try:
        for name, case in ((n, c) for n, c in CASES.items() if c in cases):
            inputs = case.inputs()
            for setting in args.batching:
                model = variant_name(case.model, setting)
                body_file = tmp / f"{model}.grpc"
                framed = body(model, inputs)
                body_file.write_bytes(framed)
                check_body(server, framed, model)
                served = served_backend(server, model)
                for in_flight in args.in_flight:
                    row = {"model": name, "backend": backend, "served_by": served, "batching": setting,
                           "body_bytes": len(framed), **point(server, model, body_file, in_flight, args, tmp)}
                    log.info("%s %s batching %s, %d in flight: %.0f req/s, %.1f µs server CPU/request, p50 %.3f ms",
                             name, backend, setting, row["in_flight"], row["requests_per_s"],
                             row["server_cpu_us_per_request"], row["latency_ms_p50"])
                    rows.append(row)
    finally:
        server.stop()
    return rows


# -- the report ----------------------------------------------------------------------------------------
def find(rows: list[dict], **match: Any) -> dict | None:
    """The row matching every key (the highest in-flight one when ``in_flight`` is not given)."""
    found = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    return max(found, key=lambda r: r["in_flight"]) if found else None


def goals(rows: list[dict]) -> list[dict[str, Any]]:
    """The server's goals (native backend: requests/s, batching, tail latency) against what was measured, at the most requests in flight."""
    out = []

    def add(text: str, value: float | None, target: float, higher: bool) -> None:
        met = None if value is None else (value >= target if higher else value <= target)
        out.append({"goal": text, "value": value, "target": target, "met": met})

    native = find(rows, model="demo_mlp", backend="native", batching="off")
    python = find(rows, model="demo_mlp", backend="python", batching="off")
    best = max((r for r in rows if r["model"] == "demo_mlp" and r["backend"] == "native"),
               key=lambda r: r["requests_per_s"], default=None)
    add("native demo_mlp requests/s (best point)", best and best["requests_per_s"], 25_000, True)
    add("native demo_mlp server CPU µs/request (at that point)", best and best["server_cpu_us_per_request"], 50, False)
    add("native / python-based demo_mlp requests/s, unbatched",
        native and python and native["requests_per_s"] / python["requests_per_s"], 6, True)
    for setting in ("off", "on"):
        n = find(rows, model="particlenet_ak4", backend="native", batching=setting)
        p = find(rows, model="particlenet_ak4", backend="python", batching=setting)
        add(f"native / python-based ParticleNet AK4 requests/s, {BATCHING[setting]}",
            n and p and n["requests_per_s"] / p["requests_per_s"], 1.4, True)
    return out


def markdown(report: dict[str, Any]) -> str:
    load = report["load_average"]
    lines = [*header("sonic bench server: the Triton server under a C load generator", report,
                     f"Load average (1 min) at start/end: {load['start']:.1f} / {load['end']:.1f} (the machine is "
                     "shared with other users: rates vary by ±25 % between runs)",
                     f"CPU pinning: {report['pinning']}",
                     f"Load: h2load {report['h2load']}, one prepared gRPC body per model replayed; medians of "
                     f"{report['rounds']} rounds of a fixed request count each; every round's requests counted as "
                     "successes by the server's statistics"),
             "| model | backend | batching | in flight | requests/s | server CPU µs/req | p50 ms | p99 ms | avg batch "
             "| h2load CPU µs/req |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["results"]:
        backend = r["backend"] if r["backend"] in r["served_by"] else f"{r['backend']} (served by {r['served_by']})"
        lines.append(f"| {r['model']} | {backend} | {r['batching']} | {r['in_flight']} | {r['requests_per_s']:,.0f} | "
                     f"{r['server_cpu_us_per_request']:.0f} | {r['latency_ms_p50']:.3f} | {r['latency_ms_p99']:.3f} | "
                     f"{r['avg_batch']:.1f} | {r['h2load_cpu_us_per_request']:.1f} |")
    lines += ["", "Server CPU: user + system time of the server process and its children (python stubs) over the "
              "round ÷ requests. h2load's own CPU per request is shown to say the load generator was not the limit.",
              "", "## Goals, at the most requests in flight", "", "| goal | measured | target | met |",
              "|---|---:|---:|---|"]
    for g in report["goals"]:
        value = "not measured" if g["value"] is None else f"{g['value']:,.1f}"
        met = "—" if g["met"] is None else ("yes" if g["met"] else "**no**")
        lines.append(f"| {g['goal']} | {value} | {g['target']:,} | {met} |")
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in report["results"]))
    fig, axes = plt.subplots(2, len(models), figsize=(6.5 * len(models), 8), squeeze=False)
    for col, model in enumerate(models):
        series = dict.fromkeys((r["backend"], r["batching"]) for r in report["results"] if r["model"] == model)
        for backend, setting in series:
            pts = [r for r in report["results"] if (r["model"], r["backend"], r["batching"]) == (model, backend, setting)]
            x = [p["in_flight"] for p in pts]
            style = {"color": "C0" if backend == "native" else "C1", "ls": "-" if setting == "on" else "--",
                     "marker": "o", "label": f"{backend}, {BATCHING[setting]}"}
            axes[0][col].plot(x, [p["requests_per_s"] for p in pts], **style)
            axes[1][col].plot(x, [p["server_cpu_us_per_request"] for p in pts], **style)
        axes[0][col].set(title=f"{model}: throughput", ylabel="requests/s")
        axes[1][col].set(title=f"{model}: server CPU per request", ylabel="µs of CPU / request")
        for ax in (axes[0][col], axes[1][col]):
            ax.set_xscale("log", base=2)
            ticks = sorted({r["in_flight"] for r in report["results"]})
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.minorticks_off()
            ax.set_xlabel("requests in flight")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=8)
    fig.suptitle(f"{report['machine']}  (h2load, medians of {report['rounds']} rounds)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    if args.quick:
        args.in_flight, args.rounds, args.seconds = [1, 16], 1, 0.3
    for option, values in (("--in-flight", args.in_flight), ("--rounds", [args.rounds]),
                           ("--connections", [args.connections]), ("--min-requests", [args.min_requests])):
        if min(values) < 1:
            raise SystemExit(f"sonic bench server: {option} must be at least 1, not {min(values)}")
    program = h2load_program()
    version = subprocess.run([program, "--version"], capture_output=True, text=True).stdout.strip()
    bench = BenchReport.start("server", args.out)  # before the pinning narrows the machine this process sees
    cores = CoreSplit(args.server_cpus)
    cases = [CASES[name] for name in args.models]
    report: dict[str, Any] = {**bench.fields(), "pinning": cores.describe(),
                              "h2load": version.split()[-1] if version else "?", "rounds": args.rounds,
                              "load_average": {"start": os.getloadavg()[0]}, "results": []}
    with tempfile.TemporaryDirectory(prefix="sonic-bench-server-") as tmp:
        for backend in args.backends:
            report["results"] += bench_backend(backend, cases, args, Path(tmp), cores)
    report["load_average"]["end"] = os.getloadavg()[0]
    report["goals"] = goals(report["results"])
    bench.write(markdown(report), report, {"server.png": lambda path: plot(report, path)})
    return 0
