"""The scheduler's bookkeeping (``framework/inflight.py``) without threads: exact states after each step."""

from __future__ import annotations

import pytest

import tests.framework.modules_for_tests as tm
from sonic_hep.framework import graph as dag
from sonic_hep.framework.inflight import EventProgress, Finished, Flight, Plan

#: a diamond behind a filter: f → a → (b, c) → d; f rejects → a, b, c, d skipped
DIAMOND = Plan(order=("f", "a", "b", "c", "d"), deps=(0, 1, 1, 1, 2),
               dependents=((1,), (2, 3), (4,), (4,), ()), skips={0: frozenset({1, 2, 3, 4})})


def test_plan_from_a_graph_lists_upstream_counts_dependents_roots_and_filter_skips():
    modules = {"f": tm.TEvenFilter("f", {}), "a": tm.TAdd("a", {"src": "", "offset": 1}),
               "b": tm.TAdd("b", {"src": "a:value", "offset": 1}), "c": tm.TAdd("c", {"src": "a:value", "offset": 2})}
    plan = Plan.from_graph(dag.build(modules, ["f", "a", "b", "c"], ["*"]))
    # a filter is upstream of every module after it on the path
    assert plan == Plan(order=("f", "a", "b", "c"), deps=(0, 1, 2, 2), dependents=((1, 2, 3), (2, 3), (), ()),
                        skips={0: frozenset({1, 2, 3})})
    assert plan.roots == [0]


def test_plan_roots_are_the_modules_that_wait_for_nothing():
    assert Plan(order=("x", "y", "z"), deps=(0, 1, 0), dependents=((1,), (), ())).roots == [0, 2]


def test_event_progress_readies_a_module_when_its_last_upstream_finishes():
    st = EventProgress("event", DIAMOND)
    assert (st.remaining, st.pending, st.passed, st.skip) == ([0, 1, 1, 1, 2], 5, True, set())
    assert st.finish(0) == Finished([1], False)
    assert st.finish(1) == Finished([2, 3], False)
    assert st.remaining == [0, 0, 0, 0, 2] and st.pending == 3
    assert st.finish(3) == Finished([], False)          # d still waits for b
    assert st.remaining[4] == 1
    assert st.finish(2) == Finished([4], False)
    assert st.finish(4) == Finished([], True)           # the last module: the event is complete
    assert st.pending == 0 and st.passed


def test_a_rejecting_filter_marks_its_descendants_skipped_and_the_event_not_passed():
    st = EventProgress("event", DIAMOND)
    st.reject(0)
    assert not st.passed and st.skip == {1, 2, 3, 4}
    # skipped modules still finish (without running), so the event completes
    assert [st.finish(i) for i in (0, 1, 2, 3, 4)] == [Finished([1], False), Finished([2, 3], False),
                                                       Finished([], False), Finished([4], False),
                                                       Finished([], True)]


def test_each_event_has_its_own_progress():
    first, second = EventProgress("e0", DIAMOND), EventProgress("e1", DIAMOND)
    first.reject(0)
    first.finish(0)
    assert second.remaining == [0, 1, 1, 1, 2] and second.passed and second.skip == set()
    assert DIAMOND.deps == (0, 1, 1, 1, 2)


def test_flight_hands_events_back_in_input_order():
    flight: Flight[str] = Flight(3)
    assert [flight.start(10), flight.start(11), flight.start(12)] == [0, 1, 2]
    assert not flight.can_start() and flight.in_flight == 3 and flight.next == 10
    assert flight.done(12, 2, "e12") == []                # waits for 10 and 11
    assert flight.waiting == {12: "e12"} and list(flight.free) == [2] and flight.in_flight == 2
    assert flight.start(13) == 2
    assert flight.done(11, 1, "e11") == []
    assert flight.done(10, 0, "e10") == ["e10", "e11", "e12"]
    assert (flight.next, flight.processed, flight.waiting, list(flight.free)) == (13, 3, {}, [1, 0])
    assert flight.done(13, 2, "e13") == ["e13"]
    assert (flight.in_flight, flight.processed, flight.next, list(flight.free)) == (0, 4, 14, [1, 0, 2])


def test_flight_reuses_the_longest_idle_stream_first():
    flight: Flight[str] = Flight(2)
    flight.start(0), flight.start(1)
    flight.done(1, 1, "b")
    flight.done(0, 0, "a")
    assert flight.start(2) == 1


def test_flight_refuses_a_start_with_every_stream_busy():
    flight: Flight[str] = Flight(1)
    flight.start(0)
    with pytest.raises(RuntimeError, match="event 1 started with every stream busy"):
        flight.start(1)
    assert flight.in_flight == 1 and flight.next == 0
