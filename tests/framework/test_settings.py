"""framework.settings.build: the one "dataclass from a dict" validator behind config sections, the
inference service's settings and grid executor options."""

from dataclasses import dataclass, field

import pytest

from sonic_hep.framework.settings import Problem, build, limits


@dataclass
class Knobs:
    streams: int = field(default=1, metadata=limits(min=1, max=8))
    timeout_s: float = field(default=1.0, metadata=limits(positive="seconds"))
    mode: str = field(default="a", metadata=limits(choices=("a", "b")))
    first: int = field(default=-1, metadata=limits(min=-1, hint=" (-1 means all)"))
    names: list[str] = field(default_factory=list)
    limit: float | None = None


class Refused(Exception):
    def __init__(self, problem: Problem):
        super().__init__(f"{problem.kind} {problem.key}: {problem.message}")
        self.problem = problem


def knobs(raw, **kwargs):
    return build(Knobs, raw, error=Refused, **kwargs)


def test_values_are_converted_and_defaults_kept():
    built = knobs({"streams": 4, "timeout_s": 2, "names": ("x",)})
    assert built == Knobs(streams=4, timeout_s=2.0, names=["x"])
    assert isinstance(built.timeout_s, float)


@pytest.mark.parametrize("raw, message", [
    ({"stream": 2}, "unknown stream: unknown key (did you mean 'streams'?); known: ['first', 'limit', 'mode', "
                    "'names', 'streams', 'timeout_s']"),
    ({"streams": "4"}, "type streams: expected int, got str '4'"),
    ({"limit": "abc"}, "type limit: expected float | None, got str 'abc'"),
    ({"streams": 0}, "value streams: must be at least 1, got 0"),
    ({"streams": 9}, "value streams: must be at most 8, got 9"),
    ({"timeout_s": float("nan")}, "value timeout_s: must be a positive number of seconds, got nan"),
    ({"timeout_s": 0}, "value timeout_s: must be a positive number of seconds, got 0.0"),
    ({"mode": "c"}, "value mode: 'c' is not one of ['a', 'b']"),
    ({"first": -2}, "value first: must be at least -1, got -2 (-1 means all)"),
])
def test_each_problem_is_one_error_naming_the_key(raw, message):
    with pytest.raises(Refused) as err:
        knobs(raw)
    assert str(err.value) == message


def test_none_is_not_range_checked_and_the_raw_key_is_kept_for_blame():
    assert knobs({"limit": None}).limit is None
    with pytest.raises(Refused) as err:
        knobs({"time-out-s": 1}, normalize_key=lambda key: key.replace("-", "_"))
    assert err.value.problem.key == "time_out_s" and err.value.problem.raw_key == "time-out-s"
    assert "timeout_s" in err.value.problem.known


def test_prepare_runs_before_conversion():
    built = knobs({"names": "one"}, prepare=lambda key, value, tp: [value] if key == "names" else value)
    assert built.names == ["one"]
