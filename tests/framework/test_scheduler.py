"""The scheduler: deterministic whatever S and T, external work frees threads, errors name module and event."""

from __future__ import annotations

import numpy as np
import pytest
import uproot

import tests.framework.modules_for_tests as tm
from sonic_hep.framework import ModuleError, Process
from sonic_hep.framework import config as cfgmod


def run(data, file="test.yaml", **kwargs):
    return Process(cfgmod.parse(data, file=file)).run(progress=False, **kwargs)


def empty(n):
    return {"type": "empty", "events": n, "chunk_size": 7}


@pytest.mark.parametrize("streams,threads", [(1, 1), (3, 2), (8, 4), (5, 1)])
def test_output_identical_for_any_streams_and_threads(tmp_path, streams, threads):
    modules = {"w": {"type": "TWait", "ms": 2.0, "jitter": True},
               "a": {"type": "TAdd", "src": "w:value", "offset": 10},
               "r": {"type": "TRandom"},
               "f": {"type": "TEvenFilter"},
               "b": {"type": "TAdd", "src": "a:value", "offset": 5}}
    out = tmp_path / f"out_{streams}_{threads}.root"
    result = run({"source": empty(40), "modules": modules, "output": {"file": str(out), "chunk_size": 6},
                  "options": {"streams": streams, "threads": threads, "seed": 42}})
    assert result.events == 40 and result.written == 20
    arrays = uproot.open(out)["Events"].arrays(library="np")
    assert arrays["event"].tolist() == list(range(1, 41, 2))          # input order, every other event
    assert arrays["b_value"].tolist() == [i + 15 for i in range(0, 40, 2)]
    key = "r_value"
    # The per-event RNG depends only on (seed, event index, label): compare against a fresh serial run.
    serial = tmp_path / "serial.root"
    run({"source": empty(40), "modules": {"r": {"type": "TRandom"}, "f": {"type": "TEvenFilter"}},
         "output": {"file": str(serial)}, "options": {"streams": 1, "threads": 1, "seed": 42}})
    np.testing.assert_array_equal(uproot.open(serial)["Events"][key].array(library="np"), arrays[key])


def test_external_work_frees_the_thread(tmp_path):
    """8 streams on one thread: every event's external work is in flight at once (the thread is not held
    while a request waits), rather than one 100 ms wait after another."""
    data = {"source": empty(8), "modules": {"w": {"type": "TWait", "ms": 100.0}},
            "options": {"streams": 8, "threads": 1}}
    tm.TWait.log.clear()
    result = run(data)
    assert result.events == 8
    in_flight = np.cumsum([1 if what == "acquire" else -1 for what, _ in tm.TWait.log])
    assert len(tm.TWait.log) == 16 and in_flight[-1] == 0
    assert in_flight.max() == 8, f"at most {in_flight.max()} of 8 external waits were in flight at once: {tm.TWait.log}"
    wait = result.timing.report()["modules"][0]["wait_ms_per_event"]
    assert 90 < wait < 250


def test_serial_external_work_does_wait(tmp_path):
    """The control: with one stream the waits come one after another (so the test above can fail)."""
    tm.TWait.log.clear()
    run({"source": empty(4), "modules": {"w": {"type": "TWait", "ms": 100.0}},
         "options": {"streams": 1, "threads": 1, "events_per_call": 1}})
    assert tm.TWait.log == [(what, i) for i in range(4) for what in ("acquire", "produce")]


def test_independent_modules_of_one_event_run_concurrently():
    tm.TSleep.peak = 0
    run({"source": empty(2), "modules": {"s1": {"type": "TSleep", "ms": 150.0}, "s2": {"type": "TSleep", "ms": 150.0}},
         "options": {"streams": 1, "threads": 2}})
    assert tm.TSleep.peak == 2  # both sleeping at the same moment


def test_module_error_names_module_and_event_and_leaves_no_output(tmp_path, nano_files):
    out = tmp_path / "out.root"
    data = {"source": {"files": [str(nano_files[0])], "chunk_size": 10},
            "modules": {"ok": {"type": "CollectionSum"}, "bad": {"type": "TRaise", "bad_index": 23}},
            "output": {"file": str(out)}, "options": {"streams": 4, "threads": 2}}
    with pytest.raises(ModuleError) as err:
        run(data)
    text = str(err.value)
    assert "'bad'" in text and "a.root entry 23" in text and "boom on purpose" in text and "event 24" in text
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [], "a failed job must not leave (temporary) output behind"


def test_reading_an_undeclared_key_is_refused():
    with pytest.raises(ModuleError) as err:
        run({"source": empty(1), "modules": {"u": {"type": "TUndeclared"}}})
    assert "does not consume it" in str(err.value)


def test_products_are_read_only_downstream():
    with pytest.raises(ModuleError) as err:
        run({"source": empty(3), "modules": {"w": {"type": "TWait", "ms": 1.0}, "m": {"type": "TMutate"}}})
    assert "'m'" in str(err.value) and "read-only" in str(err.value)


@pytest.mark.parametrize("type_name,instances", [("TLifecycle", 4), ("TSharedLifecycle", 1)])
def test_one_instance_per_stream_unless_shared(type_name, instances):
    cls = getattr(tm, type_name)
    cls.log = []
    result = run({"source": empty(40), "modules": {"m": {"type": type_name}}, "options": {"streams": 4, "threads": 2}})
    assert result.events == 40
    begun = {obj for what, obj in cls.log if what == "begin"}
    ended = {obj for what, obj in cls.log if what == "end"}
    assert len(begun) == instances and begun == ended


def test_end_job_runs_even_when_a_module_fails():
    tm.TLifecycle.log = []
    with pytest.raises(ModuleError):
        run({"source": empty(20), "modules": {"m": {"type": "TLifecycle", "fail_at": 5}},
             "options": {"streams": 2, "threads": 1}})
    assert sorted(what for what, _ in tm.TLifecycle.log) == ["begin", "begin", "end", "end"]


def test_a_refused_worker_thread_names_options_threads(tmp_path, monkeypatch):
    """A process or memory limit that refuses a thread (``can't start new thread``) is one ConfigError."""
    import threading

    from sonic_hep.framework import ConfigError

    started = []
    real_start = threading.Thread.start

    def start(self):
        if self.name.startswith("sonic-worker-") and len(started) >= 3:
            raise RuntimeError("can't start new thread")
        started.append(self.name)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    out = tmp_path / "out.root"
    with pytest.raises(ConfigError, match=r"options.threads: the system refused worker thread 4 of 8"):
        run({"source": empty(10), "modules": {"a": {"type": "TAdd"}}, "output": {"file": str(out)},
             "options": {"threads": 8}})
    monkeypatch.undo()
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_every_module_kind_has_one_row_of_the_dispatch_table():
    """The scheduler calls each kind through ``KINDS``: external work before the plain kinds."""
    from sonic_hep.framework.module import Analyzer
    from sonic_hep.framework.scheduler import Kind, kind_of

    class _Histo(Analyzer):
        def analyze(self, event):
            pass

    assert kind_of(tm.TWait("w", tm.TWait.validate_params({}))) == Kind("acquire", "acquire", external=True)
    assert kind_of(tm.TEvenFilter("f", {})) == Kind("filter", "run", filters=True)
    assert kind_of(_Histo("h", {})) == Kind("analyze", "run")
    assert kind_of(tm.TAdd("a", tm.TAdd.validate_params({}))) == Kind("produce", "run")


def test_a_module_of_no_known_kind_is_refused_by_name():
    from sonic_hep.framework.module import Module
    from sonic_hep.framework.scheduler import kind_of

    class _Neither(Module):
        pass

    with pytest.raises(TypeError, match="module 'odd' is of no known kind"):
        kind_of(_Neither("odd", {}))


def test_a_module_error_gives_the_context_once_and_keeps_the_cause_notes():
    """The message names module, phase and event once (no note repeating it); the cause's notes (the
    inference client's failover summary) reach the command line, which prints the caught error's notes."""
    cause = ValueError("bad input")
    cause.add_note("after 3 attempts; no other server to fail over to")
    err = ModuleError("tagger", "event 7", "external work", cause)
    assert str(err) == "module 'tagger' failed in external work on event 7: ValueError: bad input"
    assert err.__notes__ == ["after 3 attempts; no other server to fail over to"]
    assert not hasattr(ModuleError("m", "event 1", "run", ValueError("x")), "__notes__")


def test_a_failing_module_raises_one_module_error_without_notes():
    with pytest.raises(ModuleError) as err:
        run({"source": empty(3), "modules": {"u": {"type": "TUndeclared"}}})
    assert str(err.value).startswith("module 'u' failed in run on ") and not hasattr(err.value, "__notes__")
