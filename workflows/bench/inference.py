"""Direct vs SONIC inference, side by side in one run: latency, throughput, batching, and a workflow.

Three measurements, all on this machine, against a Triton server started here (loopback):

1. **Latency and throughput** of a small model (``demo_mlp``-like MLP, 16→32→4, 8 rows per request)
   and a large one (MLP 256→1024→1024→1024→4, 16 rows per request) for 1..N concurrent clients
   (closed loop: each client waits for its answer), in three modes: ``direct`` (onnxruntime in this
   process), ``sonic`` (gRPC, tensors in the messages) and ``sonic+shm`` (tensors in system shared
   memory).
2. **Dynamic batching**: one-row requests to the small model with many requests in flight, on a
   config with ``dynamic_batching`` and on the same model without it, the server loaded by h2load as
   ``sonic bench server`` does (prepared bodies, every request counted by the server's statistics;
   that benchmark covers backends, models and in-flight levels), and through the SonicClient (what a
   job gets). Goal: ≥ 3× server throughput.
3. **A workflow**: ``configs/demo_inference.yaml``'s toy jets and tagger plus ``--busy-ms`` of other
   CPU work per event (standing in for the rest of a reconstruction), ``--streams`` streams on
   ``--threads`` threads (default 4 on 2), direct vs SONIC. Goal: per-event time with SONIC ≤ 1.05× direct.

``--server-cpus 0-7`` pins the server (and its python stubs) to those cores and this process, its
clients and load generators to the others, as a node shared by a server and jobs would be set up;
without it everything shares every core (on a 2-core machine the server then competes with the
clients it serves, which is what the default run measures).

Results go to ``--out``: ``inference.md`` (tables), ``inference.json`` and ``inference.png``.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from ...data.demo.models import write_mlp
from ...framework import Process
from ...framework import config as cfgmod
from ...framework.inference import ServerSpec
from ...framework.inference import DirectClient
from ...framework.inference import ModelRepository
from ...framework.inference.serving import TritonServer
from ...framework.inference.sonic import ServerPool
from ...framework.inference.sonic import SonicClient
from ._load import closed_loop, in_flight
from ._machine import CoreSplit
from ._report import BenchReport, header

log = logging.getLogger(__name__)

#: name → (rows per request, features, hidden layers)
MODELS = {"small": (8, 16, (32,)), "large": (16, 256, (1024, 1024, 1024))}
MODES = ("direct", "sonic", "sonic+shm")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8], help="concurrent clients")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per measurement point")
    parser.add_argument("--depth", type=int, default=32, help="requests in flight per h2load connection (batching test)")
    parser.add_argument("--load-processes", type=int, default=2, help="h2load connections (batching test)")
    parser.add_argument("--events", type=int, default=2000, help="events per workflow run")
    parser.add_argument("--busy-ms", type=float, default=5.0, help="other CPU work per event in the workflow (ms)")
    parser.add_argument("--repeat", type=int, default=3, help="workflow runs per mode (the median is reported)")
    parser.add_argument("--streams", type=int, default=4, help="workflow streams (events in flight)")
    parser.add_argument("--threads", type=int, default=2, help="workflow worker threads")
    CoreSplit.add_arguments(parser, "the clients")
    parser.add_argument("--quick", action="store_true", help="a smoke run: short points, few clients and events")


def write_models(repository: Path) -> ModelRepository:
    """The benchmark's models: small (with and without dynamic batching) and large."""
    rows, n_in, hidden = MODELS["small"]
    write_mlp(repository, "small", n_in=n_in, hidden=hidden)
    write_mlp(repository, "small_unbatched", n_in=n_in, hidden=hidden, dynamic_batching=False)
    rows, n_in, hidden = MODELS["large"]
    write_mlp(repository, "large", n_in=n_in, hidden=hidden, seed=5)
    return ModelRepository([repository])


def sonic(server: TritonServer, repository: ModelRepository, shared_memory: str) -> SonicClient:
    pool = ServerPool([ServerSpec(server.grpc_url)], repository=repository, fallback=False, shared_memory=shared_memory)
    return SonicClient(pool)


def latency_throughput(server: TritonServer, repository: ModelRepository, clients: list[int],
                       duration: float) -> list[dict[str, Any]]:
    rows = []
    rng = np.random.default_rng(1)
    for model, (n_rows, n_in, _) in MODELS.items():
        x = rng.standard_normal((n_rows, n_in)).astype(np.float32)
        for mode in MODES:
            for n in clients:
                if mode == "direct":
                    client = DirectClient(repository, workers=n)
                else:
                    client = sonic(server, repository, "on" if mode == "sonic+shm" else "off")
                try:
                    client.infer(model, {"x": x}).result()  # load / connect outside the measurement
                    result = closed_loop(lambda c=client: c.infer(model, {"x": x}).result(), n, duration)
                finally:
                    client.close()
                rows.append({"model": model, "rows": n_rows, "mode": mode, "clients": n, **result})
                log.info("%s %s %d clients: %.0f req/s, p50 %.2f ms", model, mode, n, result["requests_per_s"],
                         result["latency_ms_p50"])
    return rows


def batching(server: TritonServer, repository: ModelRepository, depth: int, duration: float,
             processes: int) -> list[dict[str, Any]]:
    """One-row requests to the small model with and without dynamic batching: the server alone under h2load
    (``sonic bench server``'s measurement) and through the SonicClient (what a job gets)."""
    from . import server as server_bench
    from ._grpc_bodies import body

    rows = []
    x = np.random.default_rng(2).standard_normal((1, MODELS["small"][1])).astype(np.float32)
    settings = SimpleNamespace(min_requests=200, max_requests=200_000, seconds=duration, rounds=1,
                               connections=processes)
    with tempfile.TemporaryDirectory(prefix="sonic-bench-h2load-") as scratch:
        for model in ("small_unbatched", "small"):
            framed = body(model, {"x": x})
            body_file = Path(scratch) / f"{model}.grpc"
            body_file.write_bytes(framed)
            server_bench.check_body(server, framed, model)
            point = server_bench.point(server, model, body_file, depth * processes, settings, Path(scratch))
            client = sonic(server, repository, "off")
            try:
                client.infer(model, {"x": x}).result()
                via_client = in_flight(lambda c=client, m=model: c.infer(m, {"x": x}), depth, duration)
            finally:
                client.close()
            rows.append({"model": model, "dynamic_batching": model == "small", "depth": depth, "processes": processes,
                         "requests_per_s": point["requests_per_s"], "executions": point["rounds"][0]["executions"],
                         "avg_batch": point["avg_batch"],
                         "server_cpu_ms_per_request": point["server_cpu_us_per_request"] / 1000,
                         "sonic_client_requests_per_s": via_client["requests_per_s"]})
            log.info("%s: server %.0f req/s (%.3f CPU ms/req, avg batch %.1f); SonicClient %.0f req/s", model,
                     rows[-1]["requests_per_s"], rows[-1]["server_cpu_ms_per_request"], rows[-1]["avg_batch"],
                     via_client["requests_per_s"])
    unbatched, batched = rows
    batched["speedup"] = batched["requests_per_s"] / max(unbatched["requests_per_s"], 1e-9)
    batched["capacity_ratio"] = unbatched["server_cpu_ms_per_request"] / max(batched["server_cpu_ms_per_request"], 1e-9)
    return rows


def workflow(server: TritonServer, events: int, busy_ms: float, repeat: int, streams: int,
             threads: int) -> list[dict[str, Any]]:
    """ms/event of the toy-jet workflow (+ busy work), direct vs SONIC, small and large model."""
    rows = []
    for model, (_, n_in, _) in MODELS.items():
        times: dict[str, list[float]] = {"direct": [], "sonic": []}
        for _ in range(repeat):
            for mode in times:  # interleaved, so a change in the machine's load hits both modes alike
                overrides = [f"source.events={events}", "options.progress=false", "output.file=null",
                             f"options.streams={streams}", f"options.threads={threads}",
                             f"toyJets.features={n_in}", f"tagger.model={model}", f"services.inference.mode={mode}",
                             f"services.inference.repository=['{server.repository.paths[0]}']"]
                if mode == "sonic":
                    overrides += [f"services.inference.servers=['{server.grpc_url}']", "services.inference.fallback=false"]
                cfg = cfgmod.load("demo_inference", overrides)
                cfg.modules["busy"] = cfgmod.ModuleConfig("busy", "BusyProducer", {"ms": busy_ms})
                cfg.path = [*cfg.path, "busy"]
                cfg.output.products = [*cfg.output.products, "busy:value"]  # kept (not pruned) though not written
                result = Process(cfg).run(progress=False)
                times[mode].append(1000 * result.timing.elapsed / result.events)
        for mode, runs in times.items():
            rows.append({"model": model, "mode": mode, "busy_ms": busy_ms, "events": events, "streams": streams,
                         "threads": threads,
                         "ms_per_event": float(np.median(runs)), "runs_ms_per_event": runs})
            log.info("workflow %s %s: %.3f ms/event", model, mode, rows[-1]["ms_per_event"])
        rows[-1]["ratio_to_direct"] = rows[-1]["ms_per_event"] / rows[-2]["ms_per_event"]
    return rows


def markdown(report: dict[str, Any]) -> str:
    load = report.get("load_average", {})
    lines = [*header("sonic bench inference: direct vs SONIC", report,
                     f"Load average (1 min) at start/end: {load.get('start', float('nan')):.1f} / "
                     f"{load.get('end', float('nan')):.1f} (other jobs shared the machine)",
                     f"CPU pinning: {report.get('pinning', 'none (server and clients share every core)')}"),
             "## Latency and throughput (closed loop, one request per client at a time)", "",
             "| model | rows/request | mode | clients | requests/s | p50 ms | p99 ms |", "|---|---|---|---|---|---|---|"]
    for r in report["latency"]:
        lines.append(f"| {r['model']} | {r['rows']} | {r['mode']} | {r['clients']} | {r['requests_per_s']:.0f} | "
                     f"{r['latency_ms_p50']:.3f} | {r['latency_ms_p99']:.3f} |")
    bat = report["batching"]
    lines += ["", f"## Dynamic batching (small model, one-row requests; h2load, {bat[0]['processes']} connections × "
              f"{bat[0]['depth']} in flight; sonic bench server measures more)", "",
              "| config | server requests/s | executions | avg batch | server CPU ms/request | SonicClient requests/s |",
              "|---|---|---|---|---|---|"]
    for r in bat:
        lines.append(f"| {'dynamic_batching' if r['dynamic_batching'] else 'no batching'} | {r['requests_per_s']:.0f} | "
                     f"{r['executions']:.0f} | {r['avg_batch']:.1f} | {r['server_cpu_ms_per_request']:.3f} | "
                     f"{r['sonic_client_requests_per_s']:.0f} |")
    lines += ["", f"Dynamic batching: **{bat[-1]['speedup']:.2f}×** requests/s achieved, **{bat[-1]['capacity_ratio']:.2f}×** "
              "less server CPU per request (goal ≥ 3× server throughput).", "",
              f"## Workflow (toy jets + tagger + {report['workflow'][0]['busy_ms']} ms other work per event, "
              f"{report['workflow'][0].get('streams', 4)} streams, {report['workflow'][0].get('threads', 2)} threads)", "", "| model | mode | ms/event | SONIC / direct |", "|---|---|---|---|"]
    for r in report["workflow"]:
        ratio = f"{r['ratio_to_direct']:.3f}" if "ratio_to_direct" in r else ""
        lines.append(f"| {r['model']} | {r['mode']} | {r['ms_per_event']:.3f} | {ratio} |")
    lines += ["", "Goal: SONIC ≤ 1.05× direct per event."]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.5))
    for ax, model in zip(axes[:2], MODELS):
        for mode in MODES:
            pts = [r for r in report["latency"] if r["model"] == model and r["mode"] == mode]
            ax.plot([p["clients"] for p in pts], [p["requests_per_s"] for p in pts], marker="o", label=mode)
        clients = sorted({r["clients"] for r in report["latency"]})
        ax.set(title=f"{model} model: throughput", xlabel="concurrent clients", ylabel="requests/s")
        ax.set_xscale("log", base=2)
        ax.set_xticks(clients, [str(c) for c in clients])
        ax.minorticks_off()
        ax.legend()
    bat = report["batching"]
    axes[2].bar([("batched" if r["dynamic_batching"] else "unbatched") for r in bat], [r["requests_per_s"] for r in bat])
    axes[2].set(title="dynamic batching (small model)", ylabel="requests/s")
    wf = report["workflow"]
    labels = [f"{r['model']}\n{r['mode']}" for r in wf]
    axes[3].bar(labels, [r["ms_per_event"] for r in wf], color=["C0" if r["mode"] == "direct" else "C1" for r in wf])
    axes[3].set(title="workflow time per event", ylabel="ms/event")
    fig.suptitle(report["machine"], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    if args.quick:
        args.clients, args.duration, args.events, args.repeat = [1, 2], 0.3, 200, 1
    bench = BenchReport.start("inference", args.out)
    report: dict[str, Any] = bench.fields()
    report["load_average"] = {"start": os.getloadavg()[0]}
    cores = CoreSplit(args.server_cpus)
    report["pinning"] = cores.describe()
    with tempfile.TemporaryDirectory(prefix="sonic-bench-") as tmp:
        repository = write_models(Path(tmp) / "models")
        write_mlp(Path(tmp) / "models", "demo_mlp")  # the workflow's tagger model, as in data/models/demo
        with TritonServer(repository, workdir=Path(tmp) / "server", cpus=cores.server_cpus) as server:
            cores.pin_clients()
            report["latency"] = latency_throughput(server, repository, args.clients, args.duration)
            report["batching"] = batching(server, repository, args.depth, args.duration, args.load_processes)
            report["workflow"] = workflow(server, args.events, args.busy_ms, args.repeat, args.streams, args.threads)
    report["load_average"]["end"] = os.getloadavg()[0]
    bench.write(markdown(report), report, {"inference.png": lambda path: plot(report, path)})
    return 0

