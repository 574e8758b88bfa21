"""N jobs against S real servers share the work evenly, also when one server starts after the jobs.

Each job has its own client and server pool (as separate job processes do) and sends requests to a model that
queues (one instance that sleeps 2 ms per request), so every pool reads real, noisy queue times from the
servers' statistics and chooses by them. The shares are the servers' own request counts (Triton's statistics)
over a stretch in which both servers were in every job's rotation. No timing is asserted.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.framework.inference.serving.sockets import free_port
from tests.inference.conftest import sonic_client
from tests.polling import wait_for

pytestmark = pytest.mark.triton

JOBS = 8
DELAY = {"delay_ms": np.array([[2.0]], np.float32)}


def answered(url: str) -> int:
    client = grpcclient.InferenceServerClient(url)
    try:
        stats = client.get_inference_statistics("slow").model_stats
        return int(stats[0].inference_stats.success.count) if stats else 0
    finally:
        client.close()


def test_jobs_share_two_servers_evenly_also_when_one_starts_after_them(other_repository, tmp_path):
    first = TritonServer([other_repository], models=["slow"], workdir=tmp_path / "first").start()
    port = free_port()
    late = TritonServer([other_repository], models=["slow"], workdir=tmp_path / "late", grpc_port=port)
    urls = [first.grpc_url, f"127.0.0.1:{port}"]
    jobs = [sonic_client(urls, probe_timeout=1.0, shared_memory="off") for _ in range(JOBS)]
    stop = threading.Event()
    errors: list[BaseException] = []

    def job(client) -> None:
        try:
            while not stop.is_set():
                client.infer("slow", DELAY).result(60)
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(err)

    threads = [threading.Thread(target=job, args=(client,), daemon=True) for client in jobs]
    try:
        for thread in threads:
            thread.start()
        wait_for(lambda: answered(first.grpc_url) >= 50, what="the first server answering the jobs")
        late.start()  # the jobs run already; each pool finds it at its next probe
        wait_for(lambda: all(s.healthy for client in jobs for s in client.pool.states), timeout=90,
                 what="every job taking the late server into its rotation")
        before = [answered(url) for url in urls]
        wait_for(lambda: sum(answered(url) for url in urls) - sum(before) >= 1200, timeout=120,
                 what="1200 more requests answered")
        after = [answered(url) for url in urls]
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
        for client in jobs:
            client.close()
        late.stop()
        first.stop()
    assert not errors, errors[0]
    served = [b - a for a, b in zip(before, after)]
    shares = [n / sum(served) for n in served]
    assert all(abs(share - 0.5) <= 0.05 for share in shares), (served, shares)  # within 10 % of even
