"""Settings declared as a dataclass, built from a mapping: the one "dataclass from a dict" validator.

A configuration section (``source``, ``options``), the ``inference`` service's settings and a grid
executor's ``-E`` options are all a dataclass whose fields are the keys a user may write. :func:`build`
turns a mapping into one: an unknown key is refused with a did-you-mean, every value is converted with
:func:`~.params.coerce` (the same narrow rules as module parameters), and the bounds declared on a field
with :func:`limits` are checked. The caller decides what a problem looks like to the user (which error
class, which file, line and key to blame) through ``error``, so each front end keeps its own words.

Example::

    @dataclass
    class Options:
        streams: int = field(default=1, metadata=limits(min=1, max=4096))
        mode: str = field(default="direct", metadata=limits(choices=("direct", "sonic")))

    options = build(Options, {"streams": 4}, error=lambda problem: ValueError(problem.message))
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .errors import did_you_mean
from .params import coerce

T = TypeVar("T")

#: the key under which :func:`limits` stores a field's bounds in its ``metadata``
LIMITS = "limits"


@dataclass(frozen=True)
class Problem:
    """What is wrong with one key, for the caller to turn into its own error.

    Attributes:
        key: the key as the dataclass names it (after ``normalize_key``).
        kind: ``"unknown"`` (no such field), ``"type"`` (``coerce`` refused it) or ``"value"`` (out of bounds).
        message: the reason in the framework's usual words (``"must be at least 1, got 0"``).
        known: the field names, for an unknown key.
        suggestion: ``" (did you mean 'x'?)"`` or ``""``, for an unknown key.
        raw_key: the key exactly as the mapping spells it (for looking up where it came from).
    """

    key: str
    kind: Literal["unknown", "type", "value"]
    message: str
    known: tuple[str, ...] = ()
    suggestion: str = ""
    raw_key: Any = None


def limits(*, min: float | None = None, max: float | None = None, choices: tuple | None = None,
           positive: str | None = None, hint: str = "") -> dict[str, Any]:
    """A field's bounds, for ``field(metadata=...)``: declared beside the field instead of checked by hand.

    Args:
        min: smallest allowed value (inclusive); ``hint`` is appended to its message.
        max: largest allowed value (inclusive).
        choices: the allowed values.
        positive: a finite number above zero is required, in this unit (``"seconds"``): NaN and infinity
            are refused too, since a timeout of either never fires.
        hint: words after the ``min`` message, e.g. ``" (-1 means all events)"``.
    """
    return {LIMITS: {"min": min, "max": max, "choices": choices, "positive": positive, "hint": hint}}


def check_limits(value: Any, bounds: Mapping[str, Any]) -> str | None:
    """The reason ``value`` breaks ``bounds`` (from :func:`limits`), or ``None``. ``None`` values pass."""
    if value is None:
        return None
    if bounds.get("choices") is not None and value not in bounds["choices"]:
        return f"{value!r} is not one of {list(bounds['choices'])}"
    if bounds.get("positive") and (not math.isfinite(value) or value <= 0):
        return f"must be a positive number of {bounds['positive']}, got {value}"
    if bounds.get("min") is not None and value < bounds["min"]:
        return f"must be at least {bounds['min']}, got {value}{bounds.get('hint', '')}"
    if bounds.get("max") is not None and value > bounds["max"]:
        return f"must be at most {bounds['max']}, got {value}"
    return None


def build(cls: type[T], raw: Mapping[Any, Any], *, error: Callable[[Problem], Exception],
          normalize_key: Callable[[Any], str] = str,
          prepare: Callable[[str, Any, Any], Any] | None = None) -> T:
    """``raw`` checked against the dataclass ``cls`` and turned into one.

    Keys are checked in the mapping's order (the first problem is reported), then every field's
    declared bounds in field order; missing keys take the field's default.

    Args:
        cls: a dataclass whose fields all have defaults.
        raw: the user's mapping (a :class:`~.yaml_reader.LineDict` keeps its line numbers for ``error``).
        error: makes the exception raised for a :class:`Problem` (it names the file, line and key).
        normalize_key: spelling accepted for a key (``"cpus-per-task"`` → ``"cpus_per_task"``).
        prepare: ``(key, value, type) -> value`` applied before conversion (a single string where a list is
            asked for, a command-line string parsed as YAML).
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for raw_key, value in raw.items():
        key = normalize_key(raw_key)
        if key not in fields:
            suggestion = did_you_mean(key, fields)
            raise error(Problem(key, "unknown", f"unknown key{suggestion}; known: {sorted(fields)}",
                                known=tuple(fields), suggestion=suggestion, raw_key=raw_key))
        if prepare is not None:
            value = prepare(key, value, hints[key])
        try:
            values[key] = coerce(value, hints[key])
        except TypeError as err:
            raise error(Problem(key, "type", str(err), raw_key=raw_key)) from None
    built = cls(**values)
    raw_keys = {normalize_key(k): k for k in raw}
    for name, f in fields.items():
        bounds = f.metadata.get(LIMITS)
        reason = check_limits(getattr(built, name), bounds) if bounds else None
        if reason is not None:
            raise error(Problem(name, "value", reason, raw_key=raw_keys.get(name, name)))
    return built
