"""Module parameters: type coercion (``Optional[X]`` and ``X | None`` alike) and declared ranges.

Bad values must be reported as one configuration error naming the file and key, before any module
is constructed, so these tests go through ``Process`` exactly as ``sonic run`` does.
"""

from __future__ import annotations

from typing import Optional

import pytest

from sonic_hep.framework import ConfigError, Param, Process, Producer
from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.params import coerce


class ParamsTestProducer(Producer):
    """A producer whose parameters cover both spellings of an optional type and each kind of bound."""

    cut = Param(float | None, None, doc="new-style optional")
    old_cut = Param(Optional[float], None, doc="old-style optional")
    count = Param(int, 1, doc="at least one", min=1, max=10)
    scale = Param(float, 1.0, doc="positive", above=0)

    def produce(self, event) -> None:
        pass


@pytest.mark.parametrize("tp", [float | None, Optional[float]])
def test_optional_float_rejects_a_string(tp):
    with pytest.raises(TypeError, match=r"expected .*float.*None.*, got str 'abc'"):
        coerce("abc", tp)


@pytest.mark.parametrize("tp", [float | None, Optional[float]])
def test_optional_float_accepts_none_and_numbers(tp):
    assert coerce(None, tp) is None
    assert coerce(2, tp) == 2.0 and isinstance(coerce(2, tp), float)


def test_union_of_two_types_tries_each():
    assert coerce("x", int | str) == "x"
    assert coerce(3, int | str) == 3
    with pytest.raises(TypeError):
        coerce(1.5, int | str)


def test_nested_new_style_optional_in_a_list():
    assert coerce([1, None], list[float | None]) == [1.0, None]
    with pytest.raises(TypeError):
        coerce([1, "a"], list[float | None])


@pytest.mark.parametrize("given, reason", [
    (0, "must be at least 1, got 0"),
    (11, "must be at most 10, got 11"),
])
def test_declared_int_range(given, reason):
    with pytest.raises(ValueError, match=f"^{reason}$"):
        ParamsTestProducer.count.validate(given)
    assert ParamsTestProducer.count.validate(1) == 1 and ParamsTestProducer.count.validate(10) == 10


def test_declared_exclusive_lower_bound():
    with pytest.raises(ValueError, match=r"^must be above 0, got 0\.0$"):
        ParamsTestProducer.scale.validate(0)
    assert ParamsTestProducer.scale.validate(1e-9) == 1e-9


def test_none_is_not_range_checked():
    p = Param(int | None, None, min=1)
    assert p.validate(None) is None
    with pytest.raises(ValueError):
        p.validate(0)


def test_describe_shows_the_range():
    assert "at least 1 and at most 10" in ParamsTestProducer.count.describe()
    assert "above 0" in ParamsTestProducer.scale.describe()


CONFIG = """\
process: params
source:
  files: [in.root]
modules:
  p:
    type: ParamsTestProducer
"""


def load(tmp_path, overrides):
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG)
    return Process(cfgmod.load(path, overrides), open_source=False)


@pytest.mark.parametrize("override, message", [
    ("p.cut=abc", "modules.p.cut: expected float | None, got str 'abc'"),
    ("p.old_cut=abc", "modules.p.old_cut: expected "),
    ("p.count=0", "modules.p.count: must be at least 1, got 0"),
    ("p.scale=-1.5", "modules.p.scale: must be above 0, got -1.5"),
])
def test_bad_values_are_one_line_config_errors(tmp_path, override, message):
    with pytest.raises(ConfigError) as err:
        load(tmp_path, [override])
    text = str(err.value)
    assert message in text and "\n" not in text


def test_good_values_pass(tmp_path):
    process = load(tmp_path, ["p.cut=0.5", "p.count=3"])
    assert process.module_params["p"] == {"cut": 0.5, "old_cut": None, "count": 3, "scale": 1.0}


@pytest.mark.parametrize("module_type, override, message", [
    ("HitPatches", "size=0", "size: must be at least 1, got 0"),
    ("HitPatches", "planes=0", "planes: must be at least 1, got 0"),
    ("HitPatches", "adc_max=0", "adc_max: must be above 0, got 0.0"),
    ("EmTrkMichelId", "batch_size=0", "batch_size: must be at least 1, got 0"),
])
def test_shipped_modules_declare_their_ranges(tmp_path, module_type, override, message):
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG.replace("ParamsTestProducer", module_type))
    with pytest.raises(ConfigError, match=f"modules.p.{message}"):
        Process(cfgmod.load(path, [f"p.{override}"]), open_source=False)
