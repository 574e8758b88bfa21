"""The circuit breaker: its table, exact transitions, and what the pool and the client do with it.

Pure unit tests: the breaker is driven by events and explicit times; the pool and the client run on
fake connections whose answers the test gives by hand (a hung server is one whose futures the test
fails with DEADLINE_EXCEEDED), so every count below is exact. The real SIGSTOP/SIGCONT case is in
test_failover.py.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest

from sonic_hep.framework.inference.sonic.breaker import (EVENTS, MOVES, STATES, TABLE, Breaker, BreakerSettings,
                                                   event_for)
from sonic_hep.framework.inference.sonic.servers import ServerPool, ServerState
from sonic_hep.framework.inference.sonic.client import SonicClient, _Attempt
from sonic_hep.framework.inference.triton_errors import NoServerError, RequestError

SETTINGS = BreakerSettings(threshold=3, backoff_s=1.0, max_backoff_s=4.0)


def test_every_state_and_event_is_decided_by_the_table_with_allowed_moves():
    assert set(TABLE) == {(s, e) for s in STATES for e in EVENTS}
    for (state, event), (new, action) in TABLE.items():
        assert new in MOVES[state], f"{state} --{event}--> {new} is not an allowed move"
        assert (action in ("open", "reopen")) == (new == "open" and state != "open"), (state, event, action)
    reached = {new for new, _ in TABLE.values()}
    assert reached == set(STATES)


def test_consecutive_failures_open_it_and_a_success_in_between_resets_the_count():
    breaker = Breaker(SETTINGS)
    assert [breaker.record("failure", 0.0) for _ in range(2)] == ["count", "count"]
    assert breaker.record("success", 0.1) == "reset" and breaker.failures == 0
    assert [breaker.record("failure", 1.0) for _ in range(3)] == ["count", "count", "open"]
    assert breaker.state == "open" and not breaker.usable() and breaker.until == 2.0 and breaker.opened == 1


def test_open_ignores_late_answers_and_probes_once_per_backoff():
    breaker = Breaker(SETTINGS)
    breaker.record("trip", 10.0)
    assert breaker.record("success", 10.5) == "none" and breaker.record("failure", 10.5) == "none"
    assert breaker.state == "open"
    assert breaker.poll(10.99) == "none"
    assert breaker.poll(11.0) == "probe" and breaker.state == "half_open" and not breaker.usable()
    assert breaker.poll(11.5) == "none"  # one probe per back-off, not one per poll


def test_failed_probes_double_the_backoff_up_to_the_cap_and_an_answer_closes_it():
    breaker = Breaker(SETTINGS)
    breaker.record("trip", 0.0)
    backoffs = []
    now = 0.0
    for _ in range(4):
        now = breaker.until
        assert breaker.poll(now) == "probe"
        assert breaker.record("trip", now) == "reopen"
        backoffs.append(breaker.backoff)
    assert backoffs == [2.0, 4.0, 4.0, 4.0] and breaker.opened == 5
    assert breaker.poll(breaker.until) == "probe"
    assert breaker.record("success", breaker.until) == "close"
    assert breaker.usable() and breaker.backoff == 1.0 and breaker.failures == 0


def test_only_silence_counts_against_a_server():
    assert event_for("DEADLINE_EXCEEDED") == event_for("UNAVAILABLE") == "failure"
    for answered in (None, "INVALID_ARGUMENT", "INTERNAL", "NOT_FOUND", "RESOURCE_EXHAUSTED"):
        assert event_for(answered) == "success", answered


@pytest.mark.parametrize("bad", [{"threshold": 0}, {"backoff_s": 0}, {"backoff_s": 5, "max_backoff_s": 1},
                                 {"probe_timeout_s": 0}])
def test_impossible_settings_are_refused(bad):
    with pytest.raises(ValueError, match="breaker"):
        BreakerSettings(**bad)


# -- the pool and the client on fake servers ----------------------------------------------------------------
@dataclass
class FakeServer:
    """A server whose requests the test answers: ``hung`` keeps them waiting until the test fails them."""

    address: str
    hung: bool = False
    waiting: list[Future] = field(default_factory=list)
    received: int = 0
    probes: int = 0

    def send(self, info, inputs, outputs) -> Future:
        self.received += 1
        future: Future = Future()
        if self.hung:
            self.waiting.append(future)
        else:
            future.set_result({"y": inputs["x"] * 2})
        return future

    def time_out(self, n: int) -> None:
        """The client's local deadline passes for the ``n`` oldest waiting requests."""
        for future in self.waiting[:n]:
            future.set_exception(RequestError("m", self.address, "DEADLINE_EXCEEDED", "no answer", "retry"))
        del self.waiting[:n]

    def probe(self, timeout: float) -> dict[str, str]:
        self.probes += 1
        if self.hung:
            raise RequestError("*", self.address, "DEADLINE_EXCEEDED", "no answer", "retry")
        return {"m": "1"}

    def statistics(self, model: str = "") -> dict:
        return {}

    def close(self, grace_s: float | None = None) -> None:
        self.closed_with = grace_s  # None: the connection's own grace period


def pool_of(*servers: FakeServer) -> ServerPool:
    """The first server is always preferred while in rotation (shortest queue), so what the breaker does is visible."""
    pool = ServerPool([], fallback=False, refresh_s=1e9, breaker=SETTINGS)
    pool.states = [ServerState(s, breaker=Breaker(SETTINGS), models={"m": "1"}, queue_ms={"m": float(5 * i)},
                               verified={"m"}) for i, s in enumerate(servers)]
    return pool


def send(client: SonicClient, value: float) -> Future:
    info = SimpleNamespace(name="m", outputs=[])  # what the client reads of a ModelInfo: its name and output specs
    return client._send(_Attempt(info, {"x": np.array([value])}, ["y"], Future()))


def test_a_hung_server_costs_threshold_deadlines_then_every_waiting_request_fails_over():
    hung, good = FakeServer("hung:1", hung=True), FakeServer("good:1")
    pool = pool_of(hung, good)
    client = SonicClient(pool, allowed_tries=3)
    try:
        results = [send(client, float(i)) for i in range(6)]
        assert hung.received == 6 and len(hung.waiting) == 6
        hung.time_out(1)  # a deadline: another server has the model, so it goes there, not again to this one
        assert results[0].result(5)["y"].item() == 0.0 and good.received == 1
        hung.time_out(1)
        assert results[1].result(5)["y"].item() == 2.0 and good.received == 2
        assert pool.states[0].healthy and len(hung.waiting) == 4
        hung.time_out(1)  # the threshold: out of rotation; it and the 3 still waiting fail over at once
        assert [r.result(5)["y"].item() for r in results] == [2.0 * i for i in range(6)]
        assert not pool.states[0].healthy and good.received == 6 and hung.received == 6
        assert client.deadlines == {"hung:1": 3}
        counters = client.counters.as_dict()["m"]
        assert counters["retries"] == 0 and counters["failovers"] == 6 and counters["failures"] == 0
        assert [c.address for c in pool.candidates("m")] == ["good:1"]
        assert send(client, 7.0).result(5)["y"].item() == 14.0 and hung.received == 6  # not sent to it any more
        # the late answers of the abandoned requests (after SIGCONT) are ignored, not delivered twice
        for future in hung.waiting:
            future.set_result({"y": np.array([-1.0])})
        assert [r.result(5)["y"].item() for r in results] == [2.0 * i for i in range(6)]
    finally:
        client.close()


def test_a_lone_server_gets_its_deadlines_retried_until_its_breaker_opens():
    hung = FakeServer("hung:1", hung=True)
    client = SonicClient(pool_of(hung), allowed_tries=3)
    try:
        result = send(client, 1.0)
        for tries in (1, 2):
            hung.time_out(1)  # nobody else to ask: tried again on the same server (allowed_tries)
            _until(lambda: len(hung.waiting) == 1)
        assert hung.received == 3
        hung.time_out(1)  # the third deadline opens its breaker: the request fails, naming what happened
        with pytest.raises(RequestError, match="DEADLINE_EXCEEDED") as err:
            result.result(5)
        assert "no other server to fail over to" in "".join(err.value.__notes__)
        assert client.counters.as_dict()["m"]["retries"] == 2
    finally:
        client.close()


def test_a_probe_after_the_backoff_brings_it_back_or_keeps_it_out():
    hung, good = FakeServer("hung:1", hung=True), FakeServer("good:1")
    pool = pool_of(hung, good)
    pool.mark_down(hung, "not answering")
    state = pool.states[0]
    pool._refresh()
    assert hung.probes == 0 and state.breaker.state == "open"  # back-off not over
    state.breaker.until = 0.0
    pool._refresh()
    assert hung.probes == 1 and state.breaker.state == "open" and state.breaker.backoff == 2.0  # still silent
    hung.hung = False  # SIGCONT
    state.breaker.until = 0.0
    pool._refresh()
    assert hung.probes == 2 and state.healthy and state.reason == ""
    assert [c.address for c in pool.candidates("m")] == ["hung:1", "good:1"]
    pool.close()


def test_with_every_server_out_the_error_names_each_and_why():
    a, b = FakeServer("a:1", hung=True), FakeServer("b:1", hung=True)
    pool = pool_of(a, b)
    for _ in range(3):
        pool.record(a, "DEADLINE_EXCEEDED", "model 'm' on server a:1: DEADLINE_EXCEEDED: no answer")
    pool.mark_down(b, "UNAVAILABLE: connection refused")
    with pytest.raises(NoServerError, match=r"a:1: down \(3 consecutive failures, the last: .*DEADLINE_EXCEEDED.*\); "
                                            r"b:1: down \(UNAVAILABLE"):
        pool.choose("m")
    pool.close()


def _until(condition, timeout: float = 5.0) -> None:
    """Waits for the client's recovery thread (resends run there) to catch up."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the client did not resend in time"
        time.sleep(0.005)


def test_a_request_whose_server_left_the_rotation_between_choice_and_send_goes_elsewhere():
    hung, good = FakeServer("hung:1", hung=True), FakeServer("good:1")
    pool = pool_of(hung, good)
    chosen_before_it_opened = [hung]
    choose = pool.choose
    pool.choose = lambda model, exclude=frozenset(): chosen_before_it_opened.pop() if chosen_before_it_opened \
        else choose(model, exclude)
    pool.mark_down(hung, "not answering")  # opens (and fails over what waits there) after the choice
    client = SonicClient(pool)
    try:
        assert send(client, 3.0).result(5)["y"].item() == 6.0
        assert hung.received == 0 and good.received == 1  # never left waiting on it for a deadline
    finally:
        client.close()


def test_at_the_end_a_server_out_of_rotation_is_neither_asked_for_statistics_nor_waited_for():
    hung, good = FakeServer("hung:1", hung=True), FakeServer("good:1")
    pool = pool_of(hung, good)
    for state in pool.states:
        state.baseline, state.last_stats = {}, {("m", "1"): {"requests": 4, "failures": 0}}
    asked = []
    hung.statistics = lambda model="": asked.append(model) or {}  # a hung server would block here
    pool.mark_down(hung, "not answering")
    assert pool.statistics()["hung:1"]["m"]["requests"] == 4 and asked == []  # what was seen last
    pool.close()
    assert hung.closed_with == 0.0 and good.closed_with is None


def test_a_server_gone_before_the_first_request_of_a_model_is_passed_over_for_its_config():
    # chaos run: a job probed both servers at its start, one was killed before its first event, and the config
    # lookup in the first acquire failed the event with UNAVAILABLE instead of asking the next server
    dead, good = FakeServer("dead:1"), FakeServer("good:1")

    def refused(model: str, version: str = ""):
        raise RequestError(model, "dead:1", "UNAVAILABLE", "connection refused", "failover")

    dead.model_info = refused
    good.model_info = lambda model, version="": SimpleNamespace(name=model)
    pool = pool_of(dead, good)
    try:
        assert pool.model_info("m").name == "m"
        assert pool.states[0].breaker.failures == 1  # the refusal counts against the dead server
    finally:
        pool.close()


def test_a_config_lookup_refused_for_the_request_itself_is_not_retried_elsewhere():
    server = FakeServer("a:1")

    def invalid(model: str, version: str = ""):
        raise RequestError(model, "a:1", "INVALID_ARGUMENT", "bad version", "fatal")

    server.model_info = invalid
    pool = pool_of(server, FakeServer("b:1"))
    try:
        with pytest.raises(RequestError, match="bad version"):
            pool.model_info("m")
    finally:
        pool.close()


def test_an_answer_the_client_cannot_account_for_still_reaches_the_caller():
    # the byte counters read the answer before the caller gets it: a failure there once left the request
    # unanswered (its Future never done), so the event waited forever
    class Unreadable:
        def __array__(self, *args, **kwargs):
            raise ValueError("unreadable answer")

    server = FakeServer("a:1")
    server.send = lambda info, inputs, outputs: _answered({"y": Unreadable()})
    client = SonicClient(pool_of(server), allowed_tries=3)
    try:
        with pytest.raises(ValueError, match="unreadable answer"):
            send(client, 1.0).result(5)
    finally:
        client.close()


def _answered(value: dict) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future
