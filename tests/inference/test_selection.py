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


# -- balance: why N jobs against S servers did not share the work evenly ----------------------------------------
def test_queue_times_that_differ_by_noise_alone_still_take_turns():
    # identical servers under the same load read e.g. 3.0 and 3.7 ms in one interval: a tolerance of 20 % sent
    # every request of the job to the first until the next read (winner takes all, flipping at each refresh)
    pool = pool_with(("a:1", True, {"m": 3.0}), ("b:1", True, {"m": 3.7}), ("c:1", True, {"m": 5.8}),
                     ("d:1", True, {"m": 25.0}))
    picks = Counter(pool.choose("m").address for _ in range(90))
    assert picks == {"a:1": 30, "b:1": 30, "c:1": 30}  # within twice the best: equal
    assert pool.candidates("m")[-1].address == "d:1"  # past four times that: a last resort
    pool.close()


def test_a_busier_server_gets_fewer_turns_in_proportion():
    # taking every turn from a server as soon as it read busier made every job leave it at once and come back at
    # once; twice the equal bound (2 ms here) gets half the turns instead, spread out, never in bursts
    pool = pool_with(("a:1", True, {"m": 1.0}), ("b:1", True, {"m": 1.0}), ("c:1", True, {"m": 4.0}))
    sequence = [pool.choose("m").address for _ in range(100)]
    picks = Counter(sequence)
    assert abs(picks["a:1"] - 40) <= 1 and abs(picks["b:1"] - 40) <= 1 and abs(picks["c:1"] - 20) <= 1, picks
    assert "c:1c:1" not in "".join(sequence)  # its turns are spread among the others'
    pool.close()


def test_each_model_takes_its_own_turns():
    # one counter for all models aliased with the order of a job's calls: two models called in turn against
    # two servers sent each model to one server for good
    pool = pool_with(("a:1", True, {"m": 0.0, "n": 0.0}), ("b:1", True, {"m": 0.0, "n": 0.0}))
    picks = Counter((model, pool.choose(model).address) for _ in range(50) for model in ("m", "n"))
    assert picks == {("m", "a:1"): 25, ("m", "b:1"): 25, ("n", "a:1"): 25, ("n", "b:1"): 25}
    pool.close()


def test_jobs_started_together_do_not_all_begin_with_the_same_server():
    firsts = set()
    for _ in range(30):
        pool = pool_with(("a:1", True, {"m": 0.0}), ("b:1", True, {"m": 0.0}))
        firsts.add(pool.choose("m").address)
        pool.close()
    assert firsts == {"a:1", "b:1"}  # each pool's turns start at a random place


@dataclass
class Counting(Address):
    """A live server whose statistics are set by the test: cumulative requests and queue time."""

    requests: int = 0
    queue_ns: int = 0

    def serve(self, requests: int, queue_ms: float) -> None:
        self.requests += requests
        self.queue_ns += int(requests * queue_ms * 1e6)

    def statistics(self, model: str = ""):
        return {("m", "1"): {"requests": self.requests, "queue_ns": self.queue_ns}}


def test_a_server_every_job_left_comes_back_when_it_stays_quiet():
    # a burst left a's last figure at 10 ms and every job moved to b; a then answered nothing, so its figure was
    # never read again and it stayed out for as long as b stayed below 10 ms
    a, b = Counting("a:1"), Counting("b:1")
    pool = pool_with(("a:1", True, {"m": 0.0}), ("b:1", True, {"m": 0.0}))
    for state, server in zip(pool.states, (a, b)):
        state.connection = server
    a.serve(100, 20.0)
    b.serve(100, 2.0)
    pool._refresh()

    def chosen() -> Counter:
        return Counter(pool.choose("m").address for _ in range(20))

    assert chosen() == {"b:1": 20} and pool.candidates("m")[-1] is a  # far busier: a last resort
    rounds = 0
    while chosen() != {"a:1": 10, "b:1": 10}:  # back in turn with b
        b.serve(100, 2.0)  # b keeps answering at 2 ms, a answers nothing (nobody sends it anything)
        pool._refresh()
        rounds += 1
        assert rounds <= 4, pool.states[0].queue_ms  # 20 → 10 → 5 → 2.5 ms: fewer turns, then equal
    pool.close()
