"""What gRPC compression of SONIC requests saves on the wire and costs in CPU, per workflow, and where it pays.

Everything runs in the network lab (``workflows/netlab``, root only): the workflow's server (``sonic server
start --config WORKFLOW``) in one namespace, the job in the other, joined by a veth pair whose kernel counters
give the bytes on the wire each way (gRPC, HTTP/2, TCP and IP headers included). For each workflow and each
algorithm (none, gzip, deflate), ``--repeats`` jobs (``configs/<workflow>.yaml`` as shipped, SONIC, shared memory
off: a remote server's case) give, per event: bytes each way, the job's CPU (its timing report's), the
server's CPU (its process and stubs), wall time after the first event. Each compressed output is compared bit for
bit with the uncompressed one and with direct inference.

The job's and the server's CPU per event vary by more than compression costs where inference dominates them
(ProtoDUNE's server spends seconds per event), so the codec's own CPU is also measured where nothing else
runs: the workflow once in this process with direct inference, each call's input tensors compressed and
decompressed as the transport and the server do (``framework/inference/compression.py``: zlib, the level gRPC
uses), timed on this thread.

From them, per algorithm: the ratio, the codec's CPU per event (compress on the job + decompress on the
server) and ``R*``, the job's share of a link below which it wins (``workflows/grid/compression_pays.py``, what
``sonic plan`` prints with ``--compression-ratio`` and ``--compression-cpu-ms-per-event``). With
``--rates``, the first workflow runs again on links shaped to those rates (Mb/s), with and without the
algorithm of the lowest CPU per byte saved, against the prediction ``T_0 + c + B / (r R)``.

Results: ``compression.md`` and ``compression.json`` in ``--out``.

Examples::

    sonic bench compression
    sonic bench compression --workflows protodune --rates 1000 200 50 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from ...framework.inference import InferenceClient
from ._report import BenchReport, header

#: workflow → (its configuration, events of the input, generator seed)
WORKFLOWS = {"miniaod": ("miniaod", 300, 11), "protodune": ("protodune", 4, 21), "exatrkx": ("exatrkx", 20, 101)}
ALGORITHMS = ("none", "gzip", "deflate")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workflows", default="miniaod,protodune,exatrkx",
                        help=f"comma-separated, from {', '.join(WORKFLOWS)} (default: all)")
    parser.add_argument("--repeats", type=int, default=2, help="jobs per workflow and algorithm (default 2)")
    parser.add_argument("--rates", type=float, nargs="*", default=[],
                        help="link rates (Mb/s) at which --shaped-workflow runs with and without compression")
    parser.add_argument("--shaped-workflow", default="protodune", choices=sorted(WORKFLOWS),
                        help="the workflow of the shaped links (default: protodune, one stream: its transfers are "
                             "on each event's critical path)")
    parser.add_argument("--point-timeout", type=float, default=900.0, help="seconds one job may take")


class CodecMeter(InferenceClient):
    """The job's direct client, timing what compressing each call's inputs would cost: compress (the job's
    side) and decompress (the server's), per algorithm, on the inputs' raw bytes as the request carries them."""

    def __init__(self, inner: InferenceClient):
        self.inner = inner
        self.raw = 0
        self.packed = dict.fromkeys(ALGORITHMS[1:], 0)
        self.compress_s = dict.fromkeys(ALGORITHMS[1:], 0.0)
        self.decompress_s = dict.fromkeys(ALGORITHMS[1:], 0.0)

    def model_info(self, model: str) -> Any:
        return self.inner.model_info(model)

    def infer(self, model: str, inputs: Any, outputs: list[str] | None = None) -> Any:
        import time

        import numpy as np

        from ...framework.inference import compress, decompress

        message = b"".join(np.ascontiguousarray(array).tobytes() for array in inputs.values())
        self.raw += len(message)
        for algorithm in ALGORITHMS[1:]:
            start = time.thread_time()
            packed = compress(message, algorithm) or message
            middle = time.thread_time()
            if packed is not message:
                decompress(packed, algorithm)
            self.compress_s[algorithm] += middle - start
            self.decompress_s[algorithm] += time.thread_time() - middle
            self.packed[algorithm] += len(packed)
        return self.inner.infer(model, inputs, outputs)

    def statistics(self) -> dict[str, Any]:
        return self.inner.statistics()

    def close(self) -> None:
        self.inner.close()


def codec_costs(workflow: str, path: str, output: Path) -> dict[str, Any]:
    """The codec's CPU and ratio per event on the workflow's own inputs (see the module docstring)."""
    from ...framework import Process
    from ...framework import config as cfgmod
    from ...framework.inference import InferenceConfig, make_client, use_client

    cfg = cfgmod.load(WORKFLOWS[workflow][0], [f"source.files=['{path}']", "options.progress=false",
                                               f"output.file='{output}'", "services.inference.mode=direct"])
    process = Process(cfg)
    meter = CodecMeter(make_client(InferenceConfig.from_dict(dict(cfg.services["inference"]))))
    use_client(process, meter)
    events = process.run(progress=False).timing.report()["events"]
    return {"events": events, "raw_per_event": meter.raw / events,
            **{algorithm: {"ratio": meter.raw / max(1, meter.packed[algorithm]),
                           "compress_ms": 1000 * meter.compress_s[algorithm] / events,
                           "decompress_ms": 1000 * meter.decompress_s[algorithm] / events}
               for algorithm in ALGORITHMS[1:]}}


def link_bytes(lab: Any) -> tuple[int, int]:
    """(sent, received) bytes of the jobs' end of the link so far."""
    counts = []
    for name in ("tx_bytes", "rx_bytes"):
        done = lab.run(["cat", f"/sys/class/net/lab0/statistics/{name}"], timeout=30)
        counts.append(int(done.stdout))
    return counts[0], counts[1]


def run_job(lab: Any, workflow: str, path: str, output: Path, compression: str | None,
            timeout: float) -> dict[str, Any]:
    """One job in the lab's jobs namespace (``compression`` None: direct inference); its per-event figures."""
    from ._load import process_tree_cpu

    timing = output.with_suffix(".timing.json")
    command = ["sonic", "run", WORKFLOWS[workflow][0], "-i", path, "-o", str(output), "--no-progress", "-q",
               "--timing-json", str(timing)]
    if compression is not None:
        command += ["--inference", "sonic", "--server", lab.grpc_addresses[-1],
                    "-p", f"services.inference.compression={compression}",
                    "-p", "services.inference.shared_memory='off'",
                    "-p", "services.inference.fallback=never"]
    server = lab.server_pids()[-1] if compression is not None else None
    cpu_before = process_tree_cpu(server) if server else 0.0
    sent, received = link_bytes(lab)
    done = lab.run(command, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{workflow} ({compression or 'direct'}) failed: "
                           f"{(done.stderr.strip() or 'no output').splitlines()[-1]}")
    sent_after, received_after = link_bytes(lab)
    server_cpu = process_tree_cpu(server) - cpu_before if server else 0.0
    report = json.loads(timing.read_text())
    events = int(report["events"])
    steady = report.get("after_first_event") or {}
    steady_events = int(steady.get("events") or 0)
    return {"events": events, "output": str(output),
            "sent_per_event": (sent_after - sent) / events, "received_per_event": (received_after - received) / events,
            "job_cpu_ms": 1000 * report["cpu_s"] / events,  # the whole job: with batches, its first event ends late
            "event_ms": 1000 * (steady["wall_s"] / steady_events if steady_events else report["wall_s"] / events),
            "server_cpu_ms": 1000 * server_cpu / events if server else None}


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the repeats (the bytes are the same every time; CPU and time vary)."""
    keys = ("sent_per_event", "received_per_event", "job_cpu_ms", "event_ms", "server_cpu_ms")
    out = {key: statistics.median(row[key] for row in rows) for key in keys if rows[0][key] is not None}
    spread = {f"{key}_range": [min(row[key] for row in rows), max(row[key] for row in rows)]
              for key in ("job_cpu_ms", "server_cpu_ms", "event_ms") if rows[0][key] is not None}
    return {**out, **spread, "events": rows[0]["events"], "repeats": len(rows)}


def measure_workflow(lab: Any, workflow: str, out: Path, repeats: int, timeout: float) -> dict[str, Any]:
    """Every algorithm's runs of one workflow against one server in the lab, and the verdicts."""
    from ..compare import compare_files
    from ..grid.compression_pays import compression_pays
    from ._samples import generated_input

    config, events, seed = WORKFLOWS[workflow]
    path = str(Path(generated_input(out, workflow, events, seed)).resolve())
    folder = out / "jobs"
    folder.mkdir(parents=True, exist_ok=True)
    codec = codec_costs(workflow, path, folder / f"{workflow}_codec.root")
    direct = run_job(lab, workflow, path, folder / f"{workflow}_direct.root", None, timeout)
    lab.start_server("--config", config)
    try:
        run_job(lab, workflow, path, folder / f"{workflow}_warmup.root", "none", timeout)  # first executions
        rows: dict[str, dict[str, Any]] = {}
        for algorithm in ALGORITHMS:
            runs = [run_job(lab, workflow, path, folder / f"{workflow}_{algorithm}_{k}.root", algorithm, timeout)
                    for k in range(repeats)]
            rows[algorithm] = median_row(runs)
            rows[algorithm]["equal_to_direct"] = all(compare_files(direct["output"], r["output"], atol=0, rtol=0).equal
                                                     for r in runs)
            if algorithm != "none":
                uncompressed = str(folder / f"{workflow}_none_0.root")
                rows[algorithm]["equal_to_uncompressed"] = all(
                    compare_files(uncompressed, r["output"], atol=0, rtol=0).equal for r in runs)
            print(f"{workflow} {algorithm}: {rows[algorithm]['sent_per_event'] / 1e3:.1f} kB/event sent, job CPU "
                  f"{rows[algorithm]['job_cpu_ms']:.2f} ms/event, server CPU {rows[algorithm]['server_cpu_ms']:.2f} "
                  f"ms/event", flush=True)
    finally:
        lab.stop_servers()
    plain = rows["none"]
    wire = plain["sent_per_event"] + plain["received_per_event"]
    for algorithm in ALGORITHMS[1:]:
        row = rows[algorithm]
        row["ratio"] = wire / (row["sent_per_event"] + row["received_per_event"])
        row["extra_job_cpu_ms"] = row["job_cpu_ms"] - plain["job_cpu_ms"]
        row["extra_server_cpu_ms"] = row["server_cpu_ms"] - plain["server_cpu_ms"]
        row["codec_ms"] = codec[algorithm]["compress_ms"] + codec[algorithm]["decompress_ms"]
        row["verdict"] = compression_pays(wire, row["ratio"], row["codec_ms"] / 1000).as_dict()
    return {"workflow": workflow, "input": path, "events": plain["events"], "direct": direct, "codec": codec,
            "rows": rows}


def best_algorithm(result: dict[str, Any]) -> str:
    """The algorithm that pays at the highest rate (the least CPU per byte saved)."""
    verdicts = {a: result["rows"][a]["verdict"]["break_even_mbit"] or 0.0 for a in ALGORITHMS[1:]}
    return max(verdicts, key=verdicts.__getitem__)


def shaped(lab: Any, result: dict[str, Any], rates: list[float], out: Path, repeats: int,
           timeout: float) -> list[dict[str, Any]]:
    """The workflow of ``result`` at each rate, without and with its best algorithm: what compression saves per
    event, measured (both at the same rate, one after the other) and predicted (``B / R - B / (r R) - c``: the
    time without the link cancels, so a machine whose load changed since the unshaped runs still compares)."""
    from ..grid.compression_pays import time_per_event
    from ..netlab import Link

    workflow, algorithm = result["workflow"], best_algorithm(result)
    plain, packed = result["rows"]["none"], result["rows"][algorithm]
    wire = plain["sent_per_event"] + plain["received_per_event"]
    cpu_s = packed["verdict"]["cpu_s_per_event"]
    folder = out / "jobs"
    lab.start_server("--config", WORKFLOWS[workflow][0])
    points = []
    try:
        for rate in rates:
            lab.shape(Link(rate_mbit=rate))
            point = {"rate_mbit": rate, "algorithm": algorithm}
            for name in ("none", algorithm):
                runs = [run_job(lab, workflow, result["input"], folder / f"{workflow}_{rate:g}mbit_{name}_{k}.root",
                                name, timeout) for k in range(repeats)]
                point[f"{name}_event_ms"] = statistics.median(r["event_ms"] for r in runs)
                point[f"{name}_event_ms_range"] = [min(r["event_ms"] for r in runs), max(r["event_ms"] for r in runs)]
            point["saved_ms"] = point["none_event_ms"] - point[f"{algorithm}_event_ms"]
            point["predicted_saved_ms"] = 1000 * (time_per_event(0.0, wire, rate)
                                                  - time_per_event(0.0, wire, rate, packed["ratio"], cpu_s))
            point["measured_winner"] = algorithm if point["saved_ms"] > 0 else "none"
            point["predicted_winner"] = algorithm if point["predicted_saved_ms"] > 0 else "none"
            points.append(point)
            print(f"{workflow} at {rate:g} Mb/s: none {point['none_event_ms']:.1f} ms/event, {algorithm} "
                  f"{point[f'{algorithm}_event_ms']:.1f}: saves {point['saved_ms']:.1f} (predicted "
                  f"{point['predicted_saved_ms']:.1f})", flush=True)
    finally:
        lab.shape(Link())
        lab.stop_servers()
    return points


def markdown(data: dict[str, Any]) -> str:
    lines = header("sonic bench compression", data,
                   f"Jobs: each workflow's shipped configuration, SONIC over the network lab's unshaped veth link "
                   f"(shared memory off), {data['repeats']} job(s) per point, medians; bytes counted by the kernel "
                   "on the jobs' end of the link")
    lines += ["| workflow | algorithm | kB/event sent | kB/event received | ratio | codec CPU ms/event | "
              "R* (Mb/s per job) | job CPU ms/event | server CPU ms/event | wall ms/event | bits equal |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for result in data["workflows"]:
        for algorithm, row in result["rows"].items():
            verdict = row.get("verdict") or {}
            rate = verdict.get("break_even_mbit")
            codec = result["codec"].get(algorithm)
            cost = f"{codec['compress_ms']:.1f} + {codec['decompress_ms']:.1f}" if codec else ""
            equal = "yes" if row["equal_to_direct"] and row.get("equal_to_uncompressed", True) else "NO"
            lines.append(f"| {result['workflow']} | {algorithm} | {row['sent_per_event'] / 1e3:.1f} | "
                         f"{row['received_per_event'] / 1e3:.1f} | {row.get('ratio', 1.0):.2f} | {cost} | "
                         f"{'' if algorithm == 'none' else ('never' if rate is None else f'{rate:.0f}')} | "
                         f"{_range(row, 'job_cpu_ms')} | {_range(row, 'server_cpu_ms')} | {_range(row, 'event_ms')} | "
                         f"{equal} |")
    lines += ["", "Codec CPU: compress (the job) + decompress (the server), timed in this process on each workflow's "
              "own input tensors; job and server CPU: medians (range) of the jobs, whole jobs; wall: after each job's "
              "first event."]
    if data["shaped"]:
        lines += ["", "| rate (Mb/s) | algorithm | none ms/event | compressed ms/event | saved ms/event | "
                      "predicted saving | winner measured / predicted |", "|---:|---|---:|---:|---:|---:|---|"]
        for p in data["shaped"]:
            a = p["algorithm"]
            lines.append(f"| {p['rate_mbit']:g} | {a} | {p['none_event_ms']:.0f} | {p[f'{a}_event_ms']:.0f} | "
                         f"{p['saved_ms']:.0f} | {p['predicted_saved_ms']:.0f} | "
                         f"{p['measured_winner']} / {p['predicted_winner']} |")
    return "\n".join(lines) + "\n"


def _range(row: dict[str, Any], key: str) -> str:
    low, high = row[f"{key}_range"]
    return f"{row[key]:.1f} ({low:.1f}-{high:.1f})" if high > low else f"{row[key]:.1f}"


def run(args: argparse.Namespace) -> int:
    from ..netlab import LabRefused, NetworkLab

    workflows = [w.strip() for w in args.workflows.split(",") if w.strip()]
    unknown = [w for w in workflows if w not in WORKFLOWS]
    if unknown:
        raise SystemExit(f"sonic bench compression: unknown workflow(s) {unknown}; choose from {sorted(WORKFLOWS)}")
    report = BenchReport.start("compression", args.out)
    try:
        lab = NetworkLab().open()
    except LabRefused as refused:
        raise SystemExit(f"sonic bench compression: {refused}") from None
    try:
        results = [measure_workflow(lab, w, report.out, args.repeats, args.point_timeout) for w in workflows]
        points = []
        if args.rates:
            chosen = next((r for r in results if r["workflow"] == args.shaped_workflow), None)
            if chosen is None:
                chosen = measure_workflow(lab, args.shaped_workflow, report.out, args.repeats, args.point_timeout)
            points = shaped(lab, chosen, args.rates, report.out, args.repeats, args.point_timeout)
    finally:
        lab.close()
    data = {**report.fields(), "repeats": args.repeats, "workflows": results, "shaped": points}
    report.write(markdown(data), data)
    return 0
