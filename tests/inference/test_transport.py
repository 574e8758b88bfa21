"""The SONIC data plane (``connection.py``): blocking gRPC calls on per-connection worker threads, local
deadlines kept by one thread, against a real Triton server (that deadlines never cancel a call in flight is
tested in ``tests/reliability/test_local_deadlines.py``)."""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from types import SimpleNamespace

import numpy as np
import pytest

from sonic_hep.data.demo.models import write_mlp
from sonic_hep.framework.inference.sonic.calls import _Deadlines
from sonic_hep.framework.inference.sonic.connection import ServerConnection
from sonic_hep.framework.inference.server_spec import ServerSpec
from sonic_hep.framework.inference.sonic.transport import grpcio as grpcio_transport
from sonic_hep.framework.inference.direct import DirectClient
from sonic_hep.framework.inference.repository import ModelRepository
from sonic_hep.framework.inference.serving.server import TritonServer, free_port
from sonic_hep.framework.inference.triton_errors import RequestError, convert

from tests.inference.conftest import write_slow_model


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    path = tmp_path_factory.mktemp("transport-models")
    write_mlp(path, seed=5)
    write_slow_model(path)
    return path


@pytest.fixture(scope="module")
def server(repository, tmp_path_factory):
    with TritonServer([repository], workdir=tmp_path_factory.mktemp("transport-server")) as server:
        yield server


#: both transports of the data plane (the native one is built here: the test machine has g++ and libnghttp2)
TRANSPORTS = ["native", "grpcio"]


def x(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 16)).astype(np.float32)


def requests_of(connection: ServerConnection, model: str) -> int:
    return int(connection.statistics(model)[(model, "1")]["requests"])


@pytest.mark.triton
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("shared_memory", ["off", "on"])
def test_every_request_is_answered_while_workers_come_and_go(server, repository, shared_memory, transport,
                                                             monkeypatch):
    """8 sending threads, 480 requests of 1 to 5 rows: every answer is the one of its own input (equal to
    direct). On grpcio, workers leave as soon as they are idle, and no request is left in the queue with
    nobody to take it; on the native transport, the answers of many calls come back in batches."""
    monkeypatch.setattr(grpcio_transport, "WORKER_IDLE_S", 0.001)
    direct = DirectClient(ModelRepository([repository]))
    connection = ServerConnection(ServerSpec(server.grpc_url), timeout_s=30, shared_memory=shared_memory,
                                  transport=transport)
    assert connection.transport == transport
    try:
        info = connection.model_info("demo_mlp")
        sent: list[tuple[np.ndarray, Future]] = []
        lock = threading.Lock()

        def sender(k: int) -> None:
            for i in range(60):
                inputs = x(1 + (i % 5), seed=1000 * k + i)
                future = connection.send(info, {"x": inputs}, ["probs"])
                with lock:
                    sent.append((inputs, future))

        threads = [threading.Thread(target=sender, args=(k,)) for k in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(sent) == 480
        for inputs, future in sent:
            np.testing.assert_allclose(future.result(30)["probs"], direct.run("demo_mlp", {"x": inputs})["probs"],
                                       rtol=0, atol=1e-5)
        assert connection.in_flight == 0 and connection.orphaned == 0
    finally:
        connection.close()
        direct.close()


@pytest.mark.triton
def test_a_request_whose_deadline_passes_in_the_queue_is_never_sent(server, monkeypatch):
    """With one worker busy on a slow call, a request queued behind it fails at its deadline and never
    reaches the server (a server far behind gets no work nobody waits for); the slow call still ends."""
    monkeypatch.setattr(grpcio_transport, "MAX_WORKERS", 1)
    connection = ServerConnection(ServerSpec(server.grpc_url), timeout_s=0.3, transport="grpcio")
    try:
        slow, mlp = connection.model_info("slow"), connection.model_info("demo_mlp")
        before = requests_of(connection, "demo_mlp")
        busy = connection.send(slow, {"delay_ms": np.full((1, 1), 1500.0, np.float32)}, ["echo"])
        queued = connection.send(mlp, {"x": x(1, seed=1)}, ["probs"])
        for future in (busy, queued):
            with pytest.raises(RequestError, match="DEADLINE_EXCEEDED: no answer within 0.3 s"):
                future.result(30)
        assert connection.orphaned == 2
    finally:
        connection.close()  # waits for the slow call
    assert connection.in_flight == 0
    patient = ServerConnection(ServerSpec(server.grpc_url), timeout_s=30)
    try:
        assert requests_of(patient, "demo_mlp") == before  # the queued request was not sent
        assert requests_of(patient, "slow") >= 1
    finally:
        patient.close()


@pytest.mark.triton
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_errors_of_the_call_become_request_errors_with_their_status(server, transport):
    """The errors of a call (gRPC's own on grpcio, the trailers' status on the native transport) cross the
    one boundary in ``triton_errors.py`` with the status, Triton's message and the action of the policy table."""
    connection = ServerConnection(ServerSpec(server.grpc_url), timeout_s=30, transport=transport)
    try:
        info = connection.model_info("demo_mlp")
        with pytest.raises(RequestError) as wrong:
            connection.send(info, {"x": np.zeros((1, 15), np.float32)}, ["probs"]).result(30)
        assert wrong.value.status == "INVALID_ARGUMENT" and wrong.value.action == "fatal"
        assert str(wrong.value).startswith(f"model 'demo_mlp' on server {server.grpc_url}: INVALID_ARGUMENT: ")
        assert "[1,15]" in str(wrong.value).replace(" ", "")  # Triton's own words about the shape
        gone = SimpleNamespace(**{**vars(info), "name": "no_such_model"})
        with pytest.raises(RequestError) as unknown:
            connection.send(gone, {"x": x(1, seed=2)}, ["probs"]).result(30)
        assert unknown.value.action == "failover" and "no_such_model" in str(unknown.value)
    finally:
        connection.close()
    closed = ServerConnection(ServerSpec(f"127.0.0.1:{free_port()}"), timeout_s=30,  # nobody listens there
                              transport=transport)
    try:
        with pytest.raises(RequestError) as refused:
            closed.send(info, {"x": x(1, seed=3)}, ["probs"]).result(60)
        assert refused.value.status == "UNAVAILABLE" and refused.value.action == "failover"
    finally:
        closed.close()


def test_a_grpc_error_keeps_its_code_and_details():
    class Rpc(Exception):
        def code(self):
            return SimpleNamespace(name="RESOURCE_EXHAUSTED")

        def details(self):
            return "queue full\nsecond line"

    err = convert(Rpc(), "m", "h:1")
    assert (err.status, err.action, str(err)) == ("RESOURCE_EXHAUSTED", "retry",
                                                   "model 'm' on server h:1: RESOURCE_EXHAUSTED: queue full")


class _FakeCall:
    def __init__(self, deadline: float, finished: bool = False):
        self.deadline, self.finished = deadline, finished
        self.ledger = self


def test_the_deadline_keeper_expires_running_calls_in_deadline_order_and_skips_finished_ones():
    expired: list[_FakeCall] = []
    done = threading.Event()
    calls = [_FakeCall(0.0), _FakeCall(-3.0, finished=True), _FakeCall(-2.0), _FakeCall(-1.0), _FakeCall(1e9)]

    def expire(call: _FakeCall) -> None:
        expired.append(call)
        if len(expired) == 3:
            done.set()

    for call in calls:
        call.expire = expire
    keeper = _Deadlines()
    keeper._pid = os.getpid()  # its thread is started below, once every call is in (so the order is the heap's)
    for call in calls:
        keeper.add(call)
    threading.Thread(target=keeper._run, daemon=True).start()
    assert done.wait(30)
    assert expired == [calls[2], calls[3], calls[0]]  # past deadlines, earliest first; not the finished one
    assert len(keeper._heap) == 1 and keeper._heap[0][2] is calls[4]  # the far one waits


def test_close_fails_the_requests_still_queued_and_never_sends_them(monkeypatch):
    """One worker held by a call that does not end within the grace: the request queued behind it fails
    (CANCELLED, retried elsewhere by the client) when the connection closes, and is never sent."""
    monkeypatch.setattr(grpcio_transport, "MAX_WORKERS", 1)
    connection = ServerConnection(ServerSpec(f"127.0.0.1:{free_port()}"), timeout_s=30, transport="grpcio")
    sent: list[str] = []
    release = threading.Event()

    def hung_call(request, timeout, compression):  # stands in for gRPC's blocking ModelInfer
        sent.append(request.inputs[0].name)
        release.wait(30)
        raise RequestError("m", connection.address, "UNAVAILABLE", "gone", "failover")

    monkeypatch.setattr(connection._transport, "_rpc", lambda: hung_call)
    spec = SimpleNamespace(name="a", datatype="FP32")
    info = SimpleNamespace(name="m", inputs=[spec, SimpleNamespace(name="b", datatype="FP32")], outputs=[],
                           max_batch_size=0)
    busy = connection.send(info, {"a": np.zeros(2, np.float32)}, [])
    queued = connection.send(info, {"b": np.zeros(2, np.float32)}, [])
    while not sent:  # the worker has taken the first one
        release.wait(0.01)
    connection.close(grace_s=0.05)
    with pytest.raises(RequestError, match="CANCELLED: the connection was closed before this request was sent"):
        queued.result(30)
    assert queued.exception().action == "retry"
    release.set()
    with pytest.raises(RequestError, match="UNAVAILABLE"):
        busy.result(30)
    for _ in range(3000):  # until the worker has taken the queued one too (and skipped it)
        if connection.in_flight == 0:
            break
        release.wait(0.01)
    assert connection.in_flight == 0
    assert sent == ["a"]  # the queued request never reached the transport
