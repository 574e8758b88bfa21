"""The pieces of ``Process.run`` on their own: the typed parameter error, the emitter, the outputs' commit."""

from __future__ import annotations

import pytest

import tests.framework.modules_for_tests as tm
from sonic_hep.framework import ConfigError, Process
from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.errors import ParamError
from sonic_hep.framework.process import _Emitter, _Outputs


@pytest.mark.parametrize("given,problem,name,reason,known", [
    ({"ofset": 1}, "unknown", "ofset", "unknown parameter", ["offset", "src"]),
    ({"offset": "x"}, "value", "offset", "expected int, got str 'x'", []),
])
def test_validate_params_raises_a_typed_error(given, problem, name, reason, known):
    with pytest.raises(ParamError) as err:
        tm.TAdd.validate_params(given)
    assert (err.value.problem, err.value.name, err.value.reason, err.value.known) == (problem, name, reason, known)
    assert str(err.value) == f"{name}: {reason}"


def test_a_missing_required_parameter_is_a_typed_error():
    from sonic_hep.framework.registry import lookup

    with pytest.raises(ParamError) as err:
        lookup("Histogram1D").validate_params({})
    assert (err.value.problem, err.value.name, err.value.reason) == ("missing", "src", "missing required parameter")


@pytest.mark.parametrize("params,message", [
    ({"ofset": 1}, "test.yaml: modules.a.ofset: unknown parameter for module type TAdd; TAdd takes ['offset', 'src']"),
    ({"offset": "x"}, "test.yaml: modules.a.offset: expected int, got str 'x'"),
])
def test_the_process_names_file_module_and_key_of_a_parameter_error(params, message):
    data = {"source": {"type": "empty", "events": 1}, "modules": {"a": {"type": "TAdd", **params}}}
    with pytest.raises(ConfigError) as err:
        Process(cfgmod.parse(data, file="test.yaml"))
    assert str(err.value) == message


class _Root:
    """Stands in for a RootOutput: records what it is asked."""

    def __init__(self):
        self.calls: list[tuple[str, object]] = []

    def fill(self, event):
        self.calls.append(("fill", event))

    def commit(self):
        self.calls.append(("commit", None))
        return "final.root"

    def abort(self):
        self.calls.append(("abort", None))


class _Report(_Root):
    def write(self, text):
        self.calls.append(("write", text))


def test_the_emitter_fills_passed_events_and_counts_both():
    root = _Root()
    emit = _Emitter(root, None)
    for event, passed in [("e0", True), ("e1", False), ("e2", True)]:
        emit(event, passed)
    assert (emit.emitted, emit.written) == (3, 2)
    assert root.calls == [("fill", "e0"), ("fill", "e2")]


class _Timing:
    def to_json(self):
        return "{}"


def test_outputs_write_the_report_before_the_output_gets_its_name():
    root, report = _Root(), _Report()
    shared: list = []
    root.calls = report.calls = shared  # one log: the order across both
    outputs = _Outputs(root, report)
    assert outputs.path is None
    outputs.commit(_Timing())
    assert shared == [("write", "{}"), ("commit", None), ("commit", None)]
    assert outputs.path == "final.root"


def test_outputs_abort_both():
    root, report = _Root(), _Report()
    _Outputs(root, report).abort()
    assert root.calls == [("abort", None)] and report.calls == [("abort", None)]
