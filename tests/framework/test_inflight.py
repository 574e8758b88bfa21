"""The scheduler's bookkeeping (``framework/inflight.py``) without threads: exact states after each step."""

from __future__ import annotations

import numpy as np
import pytest

import tests.framework.modules_for_tests as tm
from sonic_hep.framework import graph as dag
from sonic_hep.framework.inflight import BatchProgress, Finished, Flight, Plan

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


class _Batch:
    """What BatchProgress reads of a batch: its size."""

    def __init__(self, size: int):
        self.size = size


def test_batch_progress_readies_a_module_when_its_last_upstream_finishes():
    st = BatchProgress(_Batch(3), DIAMOND)
    assert (st.remaining, st.pending, st.passed.tolist(), st.removed) == ([0, 1, 1, 1, 2], 5, [True] * 3, {})
    assert st.finish(0) == Finished([1], False)
    assert st.finish(1) == Finished([2, 3], False)
    assert st.remaining == [0, 0, 0, 0, 2] and st.pending == 3
    assert st.finish(3) == Finished([], False)          # d still waits for b
    assert st.remaining[4] == 1
    assert st.finish(2) == Finished([4], False)
    assert st.finish(4) == Finished([], True)           # the last module: the batch is complete
    assert st.pending == 0 and st.passed.all()


def test_a_filter_rejecting_some_events_removes_them_from_its_descendants_only():
    st = BatchProgress(_Batch(4), DIAMOND)
    assert st.active(1) is None                          # nothing rejected: every event
    st.reject(0, np.array([1, 3]))
    assert st.passed.tolist() == [True, False, True, False]
    assert [st.active(i).tolist() for i in (1, 2, 3, 4)] == [[0, 2]] * 4
    assert st.active(0) is None                          # the filter itself is not guarded by itself
    st.reject(0, np.array([], dtype=np.int64))           # rejecting nothing changes nothing
    assert st.passed.tolist() == [True, False, True, False]


def test_a_filter_rejecting_every_event_leaves_its_descendants_nothing_to_run():
    st = BatchProgress(_Batch(2), DIAMOND)
    st.reject(0, np.array([0, 1]))
    assert not st.passed.any() and all(len(st.active(i)) == 0 for i in (1, 2, 3, 4))
    # skipped modules still finish (without running), so the batch completes
    assert [st.finish(i) for i in (0, 1, 2, 3, 4)] == [Finished([1], False), Finished([2, 3], False),
                                                       Finished([], False), Finished([4], False),
                                                       Finished([], True)]


def test_two_filters_guarding_one_module_both_remove_events():
    plan = Plan(order=("f", "g", "m"), deps=(0, 0, 2), dependents=((2,), (2,), ()),
                skips={0: frozenset({2}), 1: frozenset({2})})
    st = BatchProgress(_Batch(4), plan)
    st.reject(0, np.array([0]))
    st.reject(1, np.array([3]))
    assert st.active(2).tolist() == [1, 2] and st.passed.tolist() == [False, True, True, False]


def test_each_batch_has_its_own_progress():
    first, second = BatchProgress(_Batch(2), DIAMOND), BatchProgress(_Batch(2), DIAMOND)
    first.reject(0, np.array([0]))
    first.finish(0)
    assert second.remaining == [0, 1, 1, 1, 2] and second.passed.all() and second.removed == {}
    assert DIAMOND.deps == (0, 1, 1, 1, 2)


def test_flight_hands_batches_of_several_events_back_in_input_order():
    flight: Flight[str] = Flight(2)
    assert [flight.start(0), flight.start(5)] == [0, 1]    # batches of 5 and 3 events
    assert flight.done(5, 1, "b", size=3) == []
    assert flight.done(0, 0, "a", size=5) == ["a", "b"]
    assert (flight.next, flight.processed) == (8, 8)


def test_flight_hands_events_back_in_input_order():
    flight: Flight[str] = Flight(3)
    assert [flight.start(10), flight.start(11), flight.start(12)] == [0, 1, 2]
    assert not flight.can_start() and flight.in_flight == 3 and flight.next == 10
    assert flight.done(12, 2, "e12") == []                # waits for 10 and 11
    assert flight.waiting == {12: ("e12", 1)} and list(flight.free) == [2] and flight.in_flight == 2
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
