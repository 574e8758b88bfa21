"""Where a served request's time goes, from the server's own statistics around one measured point.

Triton books, per request, its wait in the queue, the copy of its inputs into the backend (for a python-based
backend: into the stub's shared memory), the execution (the stub's Python, host→device, the model, device→host
and building the response) and the copy of its outputs; an execution that merged several requests is booked
to each of them. So per request, over a point:

* ``queue_ms``, ``input_ms``, ``execute_ms``, ``output_ms``: Triton's figures;
* ``requests_per_execution``: how many requests dynamic batching merged;
* ``instance_ms_per_request``: the instances' busy time per request (an execution's time once, not once per
  request it held);
* ``outside_server_ms``: what the client saw beyond the server's figures (its copies into shared memory,
  gRPC, the response's way back): the mean latency a client saw less a request's time in the server;
* ``instances_busy``: instances kept busy on average (instance time per request × requests per second).

A served point whose rows/s fall short of direct inference is then read as: the instances were busy all the time
(``instance_ms_per_request`` × requests/s ≈ instances: more instances, or a faster model path), or they
waited for requests (the client side, ``outside_server_ms``), or requests waited in the queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

PHASES = {"queue_ns": "queue_ms", "compute_input_ns": "input_ms", "compute_infer_ns": "execute_ms",
          "compute_output_ns": "output_ms"}


def counters(client: Any, model: str) -> dict[str, float]:
    """The model's server-side counters summed over the client's servers (``SonicClient.statistics``)."""
    total: dict[str, float] = {}
    for models in client.statistics().get("servers", {}).values():
        for key, value in (models.get(model) or {}).items():
            total[key] = total.get(key, 0.0) + float(value)
    return total


def steady_throughput(client: Any, model: str, inputs: Mapping[str, Any], rows: int, in_flight: int,
                      seconds: float) -> dict[str, float]:
    """Rows per second with ``in_flight`` requests of ``rows`` rows always in flight (a new one sent as each
    answer comes, as many jobs of a fleet keep a server busy), for ``seconds`` and at least 3 × ``in_flight``
    answers; also the mean latency of a request (ms) and where its time went (:func:`breakdown`)."""
    permits = threading.Semaphore(in_flight)
    lock = threading.Lock()
    latencies: list[float] = []
    errors: list[BaseException] = []

    def answered(sent_at: float, future: Any) -> None:
        with lock:
            if future.exception() is not None:
                errors.append(future.exception())
            latencies.append(time.perf_counter() - sent_at)
        permits.release()

    before = counters(client, model)
    start = time.perf_counter()
    sent = 0
    while not errors and (time.perf_counter() - start < seconds or sent < 3 * in_flight):
        permits.acquire()
        sent_at = time.perf_counter()
        client.infer(model, inputs).add_done_callback(lambda f, t=sent_at: answered(t, f))
        sent += 1
    for _ in range(in_flight):  # every request answered
        permits.acquire()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    latency_ms = 1000 * sum(latencies) / len(latencies)
    point = {"inferences_per_s": rows * sent / elapsed, "ms_per_call": latency_ms, "calls": sent,
             "requests_per_s": sent / elapsed}
    return {**point, **breakdown(before, counters(client, model), point["requests_per_s"], latency_ms)}


def breakdown(before: Mapping[str, float], after: Mapping[str, float], requests_per_s: float,
              latency_ms: float) -> dict[str, float]:
    """Per request, where the time went between two :func:`counters` reads (``requests_per_s`` and the mean
    ``latency_ms`` the client saw over them); {} when the server counted nothing."""
    delta = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in set(after) | set(before)}
    requests = delta.get("requests", 0.0)
    if requests <= 0:
        return {}
    out = {name: delta.get(key, 0.0) / requests / 1e6 for key, name in PHASES.items()}
    executions = max(delta.get("executions", 0.0), 1.0)
    out["requests_per_execution"] = requests / executions
    busy = sum(delta.get(key, 0.0) for key in ("compute_input_ns", "compute_infer_ns", "compute_output_ns"))
    out["instance_ms_per_request"] = busy / 1e6 / requests * (executions / requests)
    out["outside_server_ms"] = max(0.0, latency_ms - sum(out[name] for name in PHASES.values()))
    out["instances_busy"] = out["instance_ms_per_request"] * requests_per_s / 1000
    return out


def time_table(rows: list[Mapping[str, Any]]) -> list[str]:
    """Markdown lines: for each served point, its rows/s against in-process torch fp32 at the same batch, and
    where a request's time went (ms per request; see the module docstring)."""
    served = [r for r in rows if r["mode"] == "served-gpu" and "execute_ms" in r]
    if not served:
        return []
    lines = ["## Served against in-process, and where a served request's time goes", "",
             "ms per request; instances busy: the instances' execution time per second (the model's instance "
             "count when they never wait).", "",
             "| model | batch | served ÷ GPU fp32 | latency | queue | input copy | execute | output | outside the server "
             "| requests per execution | instances busy |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in served:
        direct = next((d for d in rows if d["model"] == r["model"] and d["batch"] == r["batch"]
                       and d["mode"] == "gpu-torch-fp32"), None)
        ratio = f"{r['inferences_per_s'] / direct['inferences_per_s']:.2f}" if direct else "–"
        lines.append(f"| {r['model']} | {r['batch']} | {ratio} | {r['ms_per_call']:.2f} | {r['queue_ms']:.2f} | "
                     f"{r['input_ms']:.2f} | {r['execute_ms']:.2f} | {r['output_ms']:.2f} | "
                     f"{r['outside_server_ms']:.2f} | {r['requests_per_execution']:.1f} | {r['instances_busy']:.1f} |")
    return lines + [""]
