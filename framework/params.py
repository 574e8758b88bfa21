"""Module parameters declared once on the class, checked before anything runs.

Like CMSSW's ``fillDescriptions`` or JANA2's ``Parameter<T>``: a module lists its parameters as class
attributes with a type, a default and a sentence of documentation. The framework validates a
configuration against them (unknown, missing, wrongly typed) before constructing anything, and
``sonic describe TYPE`` prints them.

Example::

    class JetSelector(Filter):
        jets = InputTag("Jet", fields=("pt",), doc="jets to count")
        min_pt = Param(float, 30.0, doc="pt threshold in GeV")
        min_count = Param(int, 2, doc="jets needed to keep the event")
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


def type_name(tp: Any) -> str:
    """Human-readable name of a parameter type (``list[float]``, ``int``, ``float | None``...)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):  # one spelling for Optional[X] and X | None
        return " | ".join("None" if option is type(None) else type_name(option) for option in typing.get_args(tp))
    if typing.get_origin(tp) is not None:
        return str(tp).replace("typing.", "")
    return getattr(tp, "__name__", str(tp))


def coerce(value: Any, tp: Any) -> Any:
    """Returns ``value`` converted to ``tp`` or raises ``TypeError`` saying what was expected.

    Conversions are deliberately narrow: ints are accepted where floats are asked for and lists for
    tuples, but a string is never silently turned into a number (that is YAML's job).
    """
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"expected {type_name(tp)}, got {type(value).__name__} {value!r}")
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise TypeError(f"expected {type_name(tp)} of length {len(args)}, got {len(value)} items")
            return tuple(coerce(v, a) for v, a in zip(value, args))
        inner = args[0] if args else Any
        items = [coerce(v, inner) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise TypeError(f"expected {type_name(tp)}, got {type(value).__name__} {value!r}")
        kt, vt = typing.get_args(tp) or (Any, Any)
        return {coerce(k, kt): coerce(v, vt) for k, v in value.items()}
    if origin in (typing.Union, types.UnionType):  # Optional[X] and X | None are different objects
        for option in typing.get_args(tp):
            if option is type(None) and value is None:
                return None
            try:
                return coerce(value, option)
            except TypeError:
                pass
        raise TypeError(f"expected {type_name(tp)}, got {type(value).__name__} {value!r}")
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"expected float, got {type(value).__name__} {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"expected int, got {type(value).__name__} {value!r}")
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise TypeError(f"expected {type_name(tp)}, got {type(value).__name__} {value!r}")
    return value


class Param(Generic[T]):
    """A typed, defaulted, documented module parameter.

    Args:
        type (type): the Python type (``int``, ``float``, ``str``, ``bool``, ``list[float]``...).
        default: the value when the configuration gives none; omit it to make the parameter required.
        doc (str): one sentence for ``sonic describe``.
        choices (tuple | None): the allowed values, checked at configuration time.
        min (float | None): the smallest allowed value (inclusive), checked at configuration time.
        max (float | None): the largest allowed value (inclusive).
        above (float | None): a bound the value must exceed (``above=0``: positive).

    Ranges are declared rather than checked in ``begin_job`` so that a bad value is reported with
    the configuration's file and key before any module is constructed, and ``sonic describe``
    shows them. ``None`` (for ``X | None`` parameters) is never range-checked.
    """

    def __init__(self, type: Any, default: Any = REQUIRED, doc: str = "", choices: tuple | None = None, *,
                 min: float | None = None, max: float | None = None, above: float | None = None):
        self.type, self.default, self.doc, self.choices = type, default, doc, choices
        self.min, self.max, self.above = min, max, above
        self.name = "?"

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @typing.overload
    def __get__(self, obj: None, owner: type) -> Param[T]: ...
    @typing.overload
    def __get__(self, obj: object, owner: type) -> T: ...
    def __get__(self, obj, owner):
        if obj is None:
            return self
        return obj.params[self.name]

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def validate(self, value: Any) -> Any:
        """Returns the coerced value or raises ``TypeError``/``ValueError`` with the reason."""
        value = coerce(value, self.type)
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{value!r} is not one of {list(self.choices)}")
        if value is not None:
            if self.min is not None and value < self.min:
                raise ValueError(f"must be at least {self.min}, got {value!r}")
            if self.max is not None and value > self.max:
                raise ValueError(f"must be at most {self.max}, got {value!r}")
            if self.above is not None and value <= self.above:
                raise ValueError(f"must be above {self.above}, got {value!r}")
        return value

    def range(self) -> str:
        """The declared bounds in words (``""`` when there are none), for ``sonic describe``."""
        bounds = [f"{word} {bound}" for word, bound in (("at least", self.min), ("at most", self.max),
                                                         ("above", self.above)) if bound is not None]
        return ", " + " and ".join(bounds) if bounds else ""

    def describe(self) -> str:
        default = "required" if self.required else f"default {self.default!r}"
        choices = f", one of {list(self.choices)}" if self.choices else ""
        return f"{self.name} ({type_name(self.type)}, {default}{choices}{self.range()}): {self.doc}"


class InputTag(Param[str]):
    """A parameter naming something the module consumes: a source branch, a collection or a product.

    The value is a key of the event: ``"Jet_pt"`` (a branch), ``"Jet"`` (a NanoAOD-style collection:
    branches ``Jet_<field>`` zipped into records, reading only ``fields``), or ``"label:instance"``
    (the product of another module). Declaring inputs as parameters lets the framework build the
    DAG and choose the branches to read without running any module.

    Args:
        default (str): the key consumed unless the configuration names another.
        fields (tuple[str, ...] | None): for a collection, the fields read (``None``: a plain branch or product).
        doc (str): one sentence for ``sonic describe``.
        optional (bool): when true, a missing branch/product is allowed and ``event.get`` returns ``None``.
    """

    def __init__(self, default: Any = REQUIRED, *, fields: tuple[str, ...] | None = None, doc: str = "",
                 optional: bool = False):
        super().__init__(str, default, doc)
        self.fields = tuple(fields) if fields is not None else None
        self.optional = optional

    def describe(self) -> str:
        fields = f" fields {list(self.fields)}" if self.fields else ""
        return "[input] " + super().describe() + fields


@dataclass(frozen=True)
class Output:
    """A product the module puts, declared on the class: the attribute name is the product instance.

    The product's key is ``"<module label>:<instance>"``; its default output branch is
    ``<label>_<instance>``. Declaring outputs lets the DAG be built before anything runs.

    Args:
        doc (str): what the product holds, including its shape and units.
    """

    doc: str = ""


@functools.cache
def declared(cls: type, kind: type) -> dict[str, Any]:
    """All class attributes of ``cls`` (and its bases) that are instances of ``kind``, by name.

    Cached: classes are not changed after definition, and ``EventView.put`` asks on every call.
    """
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, kind):
                found[name] = value
    return found
