"""Server choice: lowest queue time first, round robin among equals, down or failed servers skipped.

The choice is a pure function of what the pool knows about its servers, so it is tested on a pool
whose server states are set by hand (the real-server paths are in test_sonic.py / test_failover.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from sonic_hep.framework.inference.sonic.servers import ServerPool, ServerState
from sonic_hep.framework.inference.triton_errors import NoServerError, RequestError


@dataclass
class Address:
    """Stands in for a ServerConnection: the choice only reads its address."""

    address: str

    def close(self, grace_s: float = 0.0) -> None:
        pass


def pool_with(*servers: tuple[str, bool, dict[str, float]]) -> ServerPool:
    pool = ServerPool([], fallback=False, refresh_s=1e9)
    pool.states = [ServerState(Address(name), models=dict.fromkeys(queues, "1"), queue_ms=dict(queues),
                               reason="" if healthy else "connection refused", verified=set(queues))
                   for name, healthy, queues in servers]
    for state, (_, healthy, _) in zip(pool.states, servers):
        if not healthy:
            state.breaker.record("trip", 0.0)  # out of rotation, as a failed probe leaves it
    return pool


def test_lowest_queue_time_first_and_round_robin_among_equals():
    pool = pool_with(("a:1", True, {"m": 0.05}), ("b:1", True, {"m": 0.10}), ("c:1", True, {"m": 5.0}))
    picks = Counter(pool.choose("m").address for _ in range(100))
    assert picks == {"a:1": 50, "b:1": 50}  # within 0.2 ms of the best: equal, taking turns
    assert pool.candidates("m")[-1].address == "c:1"  # a busy server is only a last resort
    pool.close()


def test_down_and_already_failed_servers_are_skipped():
    pool = pool_with(("a:1", False, {"m": 0.0}), ("b:1", True, {"m": 0.0}), ("c:1", True, {"other": 0.0}))
    assert {pool.choose("m").address for _ in range(10)} == {"b:1"}
    with pytest.raises(NoServerError) as err:
        pool.choose("m", exclude=frozenset({"b:1"}))
    message = str(err.value)
    assert "model 'm'" in message and "a:1: down (connection refused)" in message
    assert "b:1: failed this request" in message and "c:1: does not have it" in message
    assert "fallback: no local repository" in message
    pool.close()


@dataclass
class Unreachable(Address):
    """A server that died: every call fails as gRPC UNAVAILABLE (as ServerConnection reports it)."""

    def statistics(self, model: str = ""):
        raise RequestError("*", self.address, "UNAVAILABLE", "failed to connect to all addresses", "failover")


@dataclass
class Answering(Address):
    """A live server: its statistics say one request waited 1 ms in the queue."""

    def statistics(self, model: str = ""):
        return {("m", "1"): {"requests": 1, "queue_ns": 1_000_000}}


def test_the_background_refresh_marks_a_silent_dead_server_down():
    # a server that died while the pool sent it nothing (another had a shorter queue) fails no request,
    # so only the refresh can notice; it must then leave the candidates and say why in errors
    pool = pool_with(("a:1", True, {"m": 0.0}), ("b:1", True, {"m": 0.0}))
    pool.states[0].connection = Unreachable("a:1")
    pool.states[1].connection = Answering("b:1")
    pool._refresh()
    assert not pool.states[0].healthy and "UNAVAILABLE" in pool.states[0].reason
    assert pool.states[1].healthy and pool.states[1].queue_ms["m"] == pytest.approx(1.0)
    assert [c.address for c in pool.candidates("m")] == ["b:1"]
    pool.close()
