"""Load generators for inference benchmarks: closed-loop clients and a fixed number of requests in flight.

* :func:`closed_loop` — N threads, each sending a request and waiting for its answer, again and again
  (what N event-processing streams do): throughput and latency percentiles.
* :func:`in_flight` — one thread keeping K asynchronous requests outstanding through a client.
* :func:`process_tree_cpu` — CPU time of a server and its python stubs.

The server alone is loaded by h2load with prepared requests (``server.py``, ``_grpc_bodies.py``):
a Python load generator costs more CPU per request than the server and measures itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np


def closed_loop(call: Callable[[], Any], clients: int, duration: float, warmup: float = 0.2) -> dict[str, float]:
    """Runs ``call`` (blocking: one request and its answer) on ``clients`` threads for ``duration`` s.

    Returns requests/s and latency mean/p50/p99 in ms, counted after ``warmup`` s.
    """
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []
    start = time.perf_counter()
    begin, end = start + warmup, start + warmup + duration

    def worker(k: int) -> None:
        mine = latencies[k]
        try:
            while True:
                t0 = time.perf_counter()
                if t0 >= end:
                    return
                call()
                t1 = time.perf_counter()
                if t0 >= begin:
                    mine.append(t1 - t0)
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    flat = np.array([x for per in latencies for x in per]) * 1000
    if not len(flat):
        return {"requests_per_s": 0.0, "latency_ms_mean": float("nan"), "latency_ms_p50": float("nan"),
                "latency_ms_p99": float("nan"), "requests": 0}
    return {"requests_per_s": len(flat) / duration, "latency_ms_mean": float(flat.mean()),
            "latency_ms_p50": float(np.percentile(flat, 50)), "latency_ms_p99": float(np.percentile(flat, 99)),
            "requests": int(len(flat))}


def in_flight(send: Callable[[], Future], depth: int, duration: float, warmup: float = 0.3) -> dict[str, float]:
    """Keeps ``depth`` requests from ``send()`` outstanding for ``duration`` s; returns completed requests/s."""
    slots = threading.Semaphore(depth)
    lock = threading.Lock()
    done = [0]
    errors: list[BaseException] = []
    counting = [False]

    def finished(fut: Future) -> None:
        if fut.exception() is not None:
            errors.append(fut.exception())
        elif counting[0]:
            with lock:
                done[0] += 1
        slots.release()

    start = time.perf_counter()
    stop = start + warmup + duration
    measured_from = start + warmup
    while time.perf_counter() < stop and not errors:
        if not counting[0] and time.perf_counter() >= start + warmup:
            counting[0] = True
            measured_from = time.perf_counter()
        slots.acquire()
        send().add_done_callback(finished)
    for _ in range(depth):  # drain
        slots.acquire()
    if errors:
        raise errors[0]
    elapsed = time.perf_counter() - measured_from
    return {"requests_per_s": done[0] / elapsed, "requests": done[0], "depth": depth}


def process_tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` and its children (server + python stubs)."""
    import psutil

    try:
        root = psutil.Process(pid)
        total = 0.0
        for proc in [root, *root.children(recursive=True)]:
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.NoSuchProcess:
                pass
        return total
    except psutil.NoSuchProcess:
        return 0.0
