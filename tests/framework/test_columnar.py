"""Columnar modules (many events per call) beside per-event modules: the same outputs, counts and random
numbers whatever the events per call, streams and threads; filters narrow batches; errors name the event."""

from __future__ import annotations

import numpy as np
import pytest
import uproot

import tests.framework.modules_for_tests as tm
from sonic_hep.framework import ModuleError, Process
from sonic_hep.framework import config as cfgmod


def run(data, **kwargs):
    return Process(cfgmod.parse(data, file="test.yaml")).run(progress=False, **kwargs)


def job(tmp_path, name, modules, events=40, options=None, source=None, products=("*",)):
    """Runs ``modules`` over the empty source; returns (result, written arrays)."""
    out = tmp_path / f"{name}.root"
    data = {"source": {"type": "empty", "events": events, "chunk_size": 7, **(source or {})}, "modules": modules,
            "output": {"file": str(out), "chunk_size": 6, "products": list(products)},
            "options": {"seed": 5, **(options or {})}}
    result = run(data)
    return result, uproot.open(out)["Events"].arrays(library="np")


#: every direction of mixing: per-event → columnar → per-event → columnar, a columnar filter in the middle,
#: external work of both kinds, jagged products read across the two kinds, random numbers of both kinds
MIXED = {"t1": {"type": "TAdd", "offset": 3},
         "c1": {"type": "CAdd", "src": "t1:value", "offset": 10},
         "f": {"type": "CEvenFilter"},
         "t2": {"type": "TAdd", "src": "c1:value", "offset": 100},
         "c2": {"type": "CAdd", "src": "t2:value", "offset": 1000},
         "w": {"type": "CWait", "ms": 5.0},
         "tsum": {"type": "TSum", "src": "w:jets"},
         "pw": {"type": "TWait", "ms": 5.0, "jitter": True},
         "csum": {"type": "CSum", "src": "pw:jets"},
         "cr": {"type": "CRandom"},
         "tr": {"type": "TRandom"}}


def expected_mixed(events):
    kept = [i for i in range(events) if i % 2 == 0]
    return {"event": [i + 1 for i in kept], "c2_value": [i + 1113 for i in kept],
            "tsum_value": [1.5 * sum(range(i % 4)) for i in kept], "csum_value": [1.5 * sum(range(i % 4)) for i in kept]}


@pytest.mark.parametrize("events_per_call,streams,threads", [(1, 1, 1), (3, 2, 2), (7, 1, 2), (16, 3, 2), (40, 1, 1),
                                                             (500, 2, 2)])
def test_a_mixed_dag_gives_the_same_output_for_any_events_per_call_streams_and_threads(tmp_path, events_per_call,
                                                                                       streams, threads):
    result, arrays = job(tmp_path, "mixed", MIXED,
                         options={"events_per_call": events_per_call, "streams": streams, "threads": threads})
    assert (result.events, result.written) == (40, 20)
    for key, values in expected_mixed(40).items():
        assert arrays[key].tolist() == values, key
    _, reference = job(tmp_path, "reference", MIXED, options={"events_per_call": 1})
    for key in reference:  # bit for bit, random numbers and jagged products included
        assert arrays[key].dtype == reference[key].dtype, key
        np.testing.assert_array_equal(np.concatenate(arrays[key]) if arrays[key].dtype == object else arrays[key],
                                      np.concatenate(reference[key]) if reference[key].dtype == object
                                      else reference[key], err_msg=key)


def test_each_event_draws_the_same_random_numbers_in_a_columnar_module_as_in_a_per_event_one(tmp_path):
    _, arrays = job(tmp_path, "rng", {"cr": {"type": "CRandom"}, "tr": {"type": "TRandom"}},
                    options={"events_per_call": 9})
    assert len(set(arrays["cr_value"].tolist())) == 40  # a generator per event, not one per batch
    # the two modules' labels differ, so their numbers do; each matches its own per-event run
    _, alone = job(tmp_path, "alone", {"cr": {"type": "TRandom"}}, options={"events_per_call": 1})
    np.testing.assert_array_equal(arrays["cr_value"], alone["cr_value"])


def test_the_report_counts_visited_passed_and_failed_events_as_in_per_event_mode(tmp_path):
    chain = {"c1": {"type": "CAdd", "offset": 1}, "f": {"type": "CEvenFilter"},
             "c2": {"type": "CAdd", "src": "c1:value", "offset": 2}}
    counts = {}
    for epc in (1, 6):
        result, arrays = job(tmp_path, f"count{epc}", chain, events=23, options={"events_per_call": epc})
        assert arrays["c2_value"].tolist() == [i + 3 for i in range(0, 23, 2)]
        counts[epc] = [(m["label"], m["visited"], m["passed"], m["failed"]) for m in result.timing.report()["modules"]]
    assert counts[6] == counts[1] == [("c1", 23, 23, 0), ("f", 23, 12, 11), ("c2", 12, 12, 0)]


def test_a_columnar_module_after_a_filter_sees_only_the_passing_events(tmp_path):
    tm.CAdd.calls.clear()
    job(tmp_path, "narrow", {"f": {"type": "CEvenFilter"}, "c": {"type": "CAdd", "offset": 0}}, events=20,
        source={"chunk_size": 20}, options={"events_per_call": 10})
    assert tm.CAdd.calls == [5, 5]


def test_a_batch_whose_every_event_is_rejected_calls_nothing_after_the_filter(tmp_path):
    tm.CAdd.calls.clear()
    # events_per_call 1: every odd event is a batch of its own, emptied by the filter
    result, arrays = job(tmp_path, "empty", {"f": {"type": "CEvenFilter"}, "c": {"type": "CAdd", "offset": 0}},
                         events=6, options={"events_per_call": 1})
    assert tm.CAdd.calls == [1, 1, 1] and arrays["c_value"].tolist() == [0, 2, 4] and result.written == 3


@pytest.mark.parametrize("events,chunk,epc", [(23, 7, 5), (23, 7, 7), (23, 7, 30), (1, 7, 4), (10, 3, 4)])
def test_batch_boundaries_first_and_last_entries_and_sizes_that_do_not_divide(tmp_path, events, chunk, epc):
    _, arrays = job(tmp_path, "edges", {"c": {"type": "CAdd", "offset": 0}, "t": {"type": "TAdd", "src": "c:value"}},
                    events=events, source={"chunk_size": chunk}, options={"events_per_call": epc})
    assert arrays["c_value"].tolist() == list(range(events))
    assert arrays["t_value"].tolist() == list(range(1, events + 1))


def test_max_events_not_a_multiple_of_the_batch(tmp_path):
    _, arrays = job(tmp_path, "max", {"c": {"type": "CAdd", "offset": 0}}, events=40, source={"max_events": 13},
                    options={"events_per_call": 5})
    assert arrays["c_value"].tolist() == list(range(13))


def test_jobs_over_entry_ranges_not_aligned_to_batches_add_up_to_one_run(tmp_path):
    modules = {"cr": {"type": "CRandom"}, "f": {"type": "CEvenFilter"}}
    _, whole = job(tmp_path, "whole", modules, events=30, options={"events_per_call": 8})
    parts = [job(tmp_path, f"part{first}", modules, events=30, source={"first_entry": first, "max_events": count},
                 options={"events_per_call": 8})[1] for first, count in ((0, 11), (11, 12), (23, 7))]
    # each job numbers its own events from 0 (the filter keeps even job indices), so compare what every event
    # draws by its identity: the random numbers of the same events are the same
    drawn = {int(e): v for part in parts for e, v in zip(part["event"], part["cr_value"])}
    for e, v in zip(whole["event"], whole["cr_value"]):
        if int(e) in drawn:
            assert drawn[int(e)] == v


def test_an_error_in_one_event_of_a_columnar_batch_names_that_event(tmp_path):
    with pytest.raises(ModuleError) as info:
        job(tmp_path, "err", {"c": {"type": "CRaise", "bad_index": 13}}, events=30, source={"chunk_size": 30},
            options={"events_per_call": 10})
    message = str(info.value)
    assert "module 'c'" in message and "entry 13" in message and "boom on purpose" in message
    assert "entries 10-19" in "\n".join(info.value.__notes__)  # how it was found: the batch rerun event by event


def test_an_error_in_a_per_event_module_inside_a_batch_names_the_event(tmp_path):
    with pytest.raises(ModuleError, match=r"module 't' failed in run on <empty> entry 13 .*boom on purpose"):
        job(tmp_path, "err", {"t": {"type": "TRaise", "bad_index": 13}}, events=30, options={"events_per_call": 10})


def test_a_columnar_filter_must_return_one_decision_per_event(tmp_path):
    with pytest.raises(ModuleError, match=r"columnar filter 'f' returned .*one entry per event"):
        job(tmp_path, "badfilter", {"f": {"type": "CBadFilter"}}, events=4, options={"events_per_call": 4})


def test_the_scheduler_chooses_events_per_call_within_the_memory_budget():
    def chosen(events, **options):
        data = {"source": {"type": "empty", "events": events}, "modules": {"c": {"type": "CAdd"}}, "options": options}
        return Process(cfgmod.parse(data, file="t.yaml")).events_per_call

    assert chosen(100_000, streams=4, memory_mb=10) == 25          # 10 MB / (0.1 MB per event × 4 streams)
    assert chosen(100_000, streams=1) == 500                        # the cap
    assert chosen(100_000, streams=1, events_per_call=3) == 3       # given: taken as it is
    assert chosen(20, streams=2) == 10                              # every stream gets a batch
    assert chosen(21, streams=2) == 11
    per_event = {"source": {"type": "empty", "events": 1000}, "modules": {"t": {"type": "TAdd"}}}
    assert Process(cfgmod.parse(per_event, file="t.yaml")).events_per_call == 1  # nothing to gain from batches


def test_describe_says_whether_a_module_is_columnar():
    assert "columnar: many events per call" in tm.CAdd.describe()
    assert "per event" in tm.TAdd.describe()
