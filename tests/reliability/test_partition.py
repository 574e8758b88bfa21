"""A silent network partition between a job and its server is found by HTTP/2 keepalive, not by ``timeout_s``.

A partition drops packets and closes nothing, so before keepalive every request on the silent connection waited
for its deadline (60 s by default) and nothing was reported meanwhile. A real Triton server sits behind a relay in
this process (``relay.py``) that is paused: both sockets stay open, no byte moves (this kernel has no netem). The
deadline stays at 60 s; what is asserted is *why* the server left the rotation and that every request was
answered, never how long it took.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

import numpy as np
import pytest

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.framework.inference.sonic.connection import ServerConnection
from sonic_hep.framework.inference.server_spec import ServerSpec
from sonic_hep.framework.inference.direct import DirectClient
from sonic_hep.framework.inference.keepalive import Keepalive, dead_by_keepalive
from sonic_hep.framework.inference.repository import ModelRepository
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.framework.inference.sonic.servers import ServerPool
from sonic_hep.framework.inference.sonic.client import SonicClient

from tests.inference.conftest import write_slow_model
from tests.polling import wait_for
from tests.reliability.relay import Relay

pytestmark = pytest.mark.triton

#: pings sooner than the default (3 s + 3 s) to keep the tests short; the deadline is the default one
KEEPALIVE = Keepalive(time_s=1.0, timeout_s=2.0)
TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """Two servers of demo_mlp (the first also has a model that answers after a while): the tests reach the first
    through a relay, the second directly."""
    slow = tmp_path_factory.mktemp("slow-model")
    write_slow_model(slow)
    with TritonServer([DEMO_REPOSITORY, slow], models=["demo_mlp", "slow"],
                      workdir=tmp_path_factory.mktemp("first")) as first, \
            TritonServer([DEMO_REPOSITORY], models=["demo_mlp"], workdir=tmp_path_factory.mktemp("second")) as second:
        yield first, second


@pytest.fixture(scope="module")
def direct():
    client = DirectClient(ModelRepository([DEMO_REPOSITORY]))
    yield client
    client.close()


def make_client(addresses: list[str], transport: str) -> SonicClient:
    pool = ServerPool([ServerSpec(a) for a in addresses], ModelRepository([DEMO_REPOSITORY]), fallback=False,
                      connection_options={"timeout_s": TIMEOUT_S, "transport": transport, "keepalive": KEEPALIVE},
                      refresh_s=0.2)
    return SonicClient(pool)


class Stream:
    """Requests sent from a thread, up to 8 in flight (a job's streams), until :meth:`stop`; every one is kept."""

    def __init__(self, client: SonicClient, seed: int):
        self.client, self.rng = client, np.random.default_rng(seed)
        self.sent: list[tuple[np.ndarray, Future]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        flying: list[Future] = []
        while not self._stop.is_set():
            x = self.rng.standard_normal((int(self.rng.integers(1, 20)), 16)).astype(np.float32)
            flying.append(self.client.infer("demo_mlp", {"x": x}))
            self.sent.append((x, flying[-1]))
            if len(flying) >= 8:
                flying.pop(0).exception(TIMEOUT_S * 3)  # waits for it (its outcome is checked at the end)
            self._stop.wait(0.002)

    def stop(self) -> list[tuple[np.ndarray, Future]]:
        self._stop.set()
        self._thread.join(TIMEOUT_S * 3)
        assert not self._thread.is_alive(), "the stream is stuck"
        return self.sent


def served(client: SonicClient, address: str) -> int:
    return client.counters.as_dict().get("demo_mlp", {}).get("servers", {}).get(address, 0)


def check_answers(sent: list[tuple[np.ndarray, Future]], direct: DirectClient) -> None:
    """Every request answered (none lost, none failed), each equal to direct inference."""
    for x, future in sent:
        np.testing.assert_allclose(future.result(TIMEOUT_S * 3)["probs"], direct.run("demo_mlp", {"x": x})["probs"],
                                   rtol=0, atol=1e-5)


@pytest.mark.parametrize("transport", ["native", "grpcio"])
def test_a_silently_partitioned_server_leaves_the_rotation_by_keepalive_and_its_work_moves(servers, direct, transport):
    first, second = servers
    with Relay(first.grpc_url) as relay:
        client = make_client([relay.address, second.grpc_url], transport)
        try:
            stream = Stream(client, seed=1)
            wait_for(lambda: served(client, relay.address) >= 20, what="requests through the relay")
            relay.pause()
            state = client.pool.states[0]
            # bound far above keepalive (3 s) and below what a deadline would need (60 s, then 3 of them)
            wait_for(lambda: state.breaker.opened >= 1, timeout=45, what="the partitioned server out of rotation")
            moved_from = served(client, second.grpc_url)
            wait_for(lambda: served(client, second.grpc_url) >= moved_from + 50, what="requests on the other server")
            sent = stream.stop()
            assert not state.healthy
            assert "UNAVAILABLE" in state.reason and dead_by_keepalive(state.reason), state.reason
            assert "DEADLINE" not in state.reason, state.reason
            assert not client.deadlines, client.deadlines  # no request waited for its deadline anywhere
            check_answers(sent, direct)
            assert client.counters.as_dict()["demo_mlp"]["failures"] == 0
        finally:
            relay.resume()
            client.close()


@pytest.mark.parametrize("transport", ["native", "grpcio"])
def test_a_partition_of_the_only_server_loses_no_request_when_it_heals(servers, direct, transport):
    first, _ = servers
    with Relay(first.grpc_url) as relay:
        client = make_client([relay.address], transport)  # no other server, no fallback
        try:
            stream = Stream(client, seed=2)
            wait_for(lambda: served(client, relay.address) >= 20, what="requests through the relay")
            relay.pause()
            state = client.pool.states[0]
            wait_for(lambda: state.breaker.opened >= 1, timeout=45, what="the keepalive to find the partition")
            assert dead_by_keepalive(state.reason), state.reason
            relay.resume()  # healed: the requests that waited for it are sent again
            wait_for(lambda: state.healthy, timeout=90, what="the server back in rotation")
            count = len(stream.sent)
            wait_for(lambda: len(stream.sent) >= count + 50, what="requests after the heal")
            check_answers(stream.stop(), direct)
            counts = client.counters.as_dict()["demo_mlp"]
            assert counts["failures"] == 0 and counts["failovers"] >= 1, counts  # some failed on the partition
        finally:
            relay.resume()
            client.close()


def test_servers_we_start_accept_the_clients_pings_through_a_long_call(servers):
    # a call the server answers after seconds, pings every second meanwhile: a gRPC server with Triton's default
    # limits (one ping per 5 minutes while it sends nothing) ends the connection on the third one ("too many pings")
    first, _ = servers
    connections = [ServerConnection(ServerSpec(first.grpc_url), timeout_s=TIMEOUT_S, transport=transport,
                                    keepalive=KEEPALIVE) for transport in ("native", "grpcio")]
    try:
        info = connections[0].model_info("slow")
        delay = np.array([[5000.0]], np.float32)  # the two calls run one after the other: the second waits 10 s
        futures = [connection.send(info, {"delay_ms": delay}, ["echo"]) for connection in connections]
        for future in futures:
            np.testing.assert_array_equal(future.result(TIMEOUT_S)["echo"], delay)
    finally:
        for connection in connections:
            connection.close()


@pytest.mark.parametrize("transport", ["native", "grpcio"])
def test_a_link_that_stalls_in_the_middle_of_a_request_fails_over(servers, direct, transport):
    # the relay lets the first 2,000 bytes of the next requests pass and then stops, both ways, without closing:
    # the server holds half a message (a request of 128 rows is ~8 KiB), the client's connection is open and silent
    first, second = servers
    with Relay(first.grpc_url) as relay:
        client = make_client([relay.address, second.grpc_url], transport)
        try:
            warm = np.zeros((1, 16), np.float32)
            wait_for(lambda: client.infer("demo_mlp", {"x": warm}).result(TIMEOUT_S) is not None
                     and served(client, relay.address) >= 1, what="a request answered through the relay")
            base = relay.forwarded["up"]
            relay.stall_after(2000)
            rng = np.random.default_rng(3)
            sent = [(x, client.infer("demo_mlp", {"x": x}))
                    for x in (rng.standard_normal((128, 16)).astype(np.float32) for _ in range(6))]
            wait_for(lambda: relay.paused, timeout=30, what="the stall")
            assert relay.held > 0 and relay.forwarded["up"] - base == 2000  # cut inside a chunk: mid-message
            state = client.pool.states[0]
            wait_for(lambda: state.breaker.opened >= 1, timeout=45, what="the stalled server out of rotation")
            assert dead_by_keepalive(state.reason) and "DEADLINE" not in state.reason, state.reason
            check_answers(sent, direct)  # every request answered, the stalled ones by the other server
            assert not client.deadlines, client.deadlines
            counts = client.counters.as_dict()["demo_mlp"]
            assert counts["failures"] == 0 and counts["failovers"] >= 1, counts
        finally:
            client.close()  # and the relay closes still stalled: the server never gets the rest of the message
