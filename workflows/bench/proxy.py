"""What a gRPC proxy in front of a Triton server costs per call: the same server directly and through HAProxy.

A site that offers its GPUs behind one address and one token check (``sonic fleet start --proxy haproxy``, the
proxy of ``serving/grpc_proxy.py``) adds a hop to every call. Here one ``demo_mlp`` server (one row per request:
the smallest call, so the proxy's share is the largest it gets) is measured three ways, ``direct``, ``proxy``
(HAProxy in front, no token check) and ``proxy + token`` (every call carries an RS256 bearer token that HAProxy
verifies: ``jwt_verify`` on each call), each on one loopback machine:

* **h2load** (Debian ``nghttp2-client``) replaying a prepared ``ModelInfer`` body, ``--rounds`` rounds of a fixed
  request count (never a duration: a Triton 2.51 server can crash when clients cancel) at each ``--in-flight``:
  requests/s, p50/p99 latency from h2load's per-request log, HAProxy's CPU per call (its process, /proc before
  and after). The server's statistics must grow by exactly the requests sent (h2load counts an HTTP 200 as
  success even when the proxy refused the call in its gRPC status);
* **the SONIC client** (``--clients`` threads, each a call and its answer again and again, as event-processing
  streams do, ``--seconds`` each): what a job sees.

The table gives medians of the rounds. Results: ``proxy.md`` and ``proxy.json`` in ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ...data.demo.models import REPOSITORY
from ...framework.inference import InferenceConfig
from ...framework.inference.serving import GrpcProxy, ProxyOptions, TokenRules, TritonServer
from ._grpc_bodies import body
from ._jwt import AUDIENCE, ISSUER, Issuer
from ._load import closed_loop, process_tree_cpu
from ._machine import describe_load, load_average
from ._report import BenchReport, header
from .server import model_counts, run_h2load

MODEL = "demo_mlp"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=20_000, help="requests per h2load round (default 20,000)")
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 16], help="h2load streams in flight")
    parser.add_argument("--rounds", type=int, default=3, help="h2load rounds per point; the table gives the median")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8], help="SONIC client threads")
    parser.add_argument("--seconds", type=float, default=3.0, help="each SONIC client measurement lasts this long")


def h2load_point(server: TritonServer, url: str, body_file: Path, log_file: Path, requests: int, in_flight: int,
                 headers: tuple[str, ...], proxy_pid: int | None) -> dict[str, float]:
    """One round: h2load's numbers, the server's count checked, HAProxy's CPU per call."""
    before, cpu = model_counts(server, MODEL)["success"], process_tree_cpu(proxy_pid) if proxy_pid else 0.0
    run = run_h2load(url, body_file, requests, 1, in_flight, log_file, headers)
    answered = model_counts(server, MODEL)["success"] - before
    if answered != requests or run["failed"]:
        raise SystemExit(f"sonic bench proxy: the server answered {answered} of {requests} requests sent to {url} "
                         f"({run['failed']} failed): a refused token or a broken proxy")
    times = run["request_us"]
    return {"requests_per_s": requests / run["elapsed_s"], "p50_us": float(np.percentile(times, 50)),
            "p99_us": float(np.percentile(times, 99)),
            "proxy_cpu_us": (process_tree_cpu(proxy_pid) - cpu) / requests * 1e6 if proxy_pid else 0.0}


def client_point(address: str, token_file: Path | None, clients: int, seconds: float) -> dict[str, float]:
    """The SONIC client (its default transport) in a closed loop of ``clients`` threads."""
    from ...framework.inference.sonic import SonicClient

    settings = {"mode": "sonic", "servers": [address], "fallback": False, "shared_memory": "off"}
    if token_file is not None:
        settings["token_file"] = str(token_file)
    client = SonicClient.from_config(InferenceConfig.from_dict(settings), None)
    x = {"x": np.random.default_rng(1).random((1, 16), dtype=np.float32)}
    try:
        client.infer(MODEL, x).result()  # connected, config read
        return closed_loop(lambda: client.infer(MODEL, x).result(), clients, seconds)
    finally:
        client.close()


def run(args: argparse.Namespace) -> int:
    report = BenchReport.start("proxy", args.out)
    load_before = load_average()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sonic-bench-proxy-") as tmp:
        folder = Path(tmp)
        issuer = Issuer.make(folder, "bench")
        token_file = folder / "token"
        token_file.write_text(issuer.token(lifetime_s=3600))
        body_file = folder / "body.bin"
        body_file.write_bytes(body(MODEL, {"x": np.random.default_rng(0).random((1, 16), dtype=np.float32)}))
        rules = TokenRules(str(issuer.public), ISSUER, AUDIENCE)
        with TritonServer([REPOSITORY], models=[MODEL], workdir=folder / "server") as server, \
                GrpcProxy(folder / "plain") as plain, GrpcProxy(folder / "tokens", ProxyOptions(tokens=rules)) as checked:
            for proxy in (plain, checked):
                proxy.set_backends({"server": server.grpc_url})
            authorization = (f"authorization: Bearer {token_file.read_text()}",)
            targets = [("direct", server.grpc_url, (), None, None),
                       ("proxy", plain.address, (), plain.process.pid, None),
                       ("proxy + token", checked.address, authorization, checked.process.pid, token_file)]
            for name, url, headers, pid, token in targets:
                for in_flight in args.in_flight:
                    h2load_point(server, url, body_file, folder / "h2load.log", min(2000, args.requests), in_flight,
                                 headers, pid)  # warm-up
                    rounds = [h2load_point(server, url, body_file, folder / "h2load.log", args.requests, in_flight,
                                           headers, pid) for _ in range(args.rounds)]
                    rows.append({"tool": "h2load", "target": name, "in_flight": in_flight,
                                 **{k: statistics.median(r[k] for r in rounds) for k in rounds[0]}})
                for clients in args.clients:
                    measured = client_point(url, token, clients, args.seconds)
                    rows.append({"tool": "SONIC client", "target": name, "in_flight": clients,
                                 "requests_per_s": measured["requests_per_s"],
                                 "p50_us": measured["latency_ms_p50"] * 1000, "p99_us": measured["latency_ms_p99"] * 1000})
    data = {**report.fields(), "load": describe_load(load_before, load_average()), "model": MODEL, "rows": rows}
    report.write(markdown(data), data)
    return 0


def markdown(data: dict[str, Any]) -> str:
    lines = header("Proxy: one Triton server directly and through HAProxy", data, f"Model: `{data['model']}`, "
                   "one row per call, everything on loopback")
    lines += ["| load | target | in flight | requests/s | p50 µs | p99 µs | p50 added µs | HAProxy CPU µs/call |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    direct = {(r["tool"], r["in_flight"]): r["p50_us"] for r in data["rows"] if r["target"] == "direct"}
    for r in data["rows"]:
        added = r["p50_us"] - direct[(r["tool"], r["in_flight"])]
        cpu = f"{r['proxy_cpu_us']:.0f}" if r.get("proxy_cpu_us") else ""
        lines.append(f"| {r['tool']} | {r['target']} | {r['in_flight']} | {r['requests_per_s']:,.0f} | "
                     f"{r['p50_us']:.0f} | {r['p99_us']:.0f} | {added:+.0f} | {cpu} |")
    return "\n".join(lines) + "\n"
