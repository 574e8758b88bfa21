"""Command-line flags generated from :class:`ServerOptions`: one flag per field, one name and one meaning.

``sonic server start`` and ``sonic fleet start`` take their server's options from the same fields, so a flag
is the field's name with dashes (``python_shm_mb`` → ``--python-shm-mb``), its help is the field's help, its
type and choices are the field's, and its value is checked by the same validator as the configuration's
``services.inference.fallback_server`` (``ServerOptions.from_dict``). A flag not given stays ``None`` on the
namespace, so a command can lay the flags over other settings (a configuration's ``fallback_server``).
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from ...framework.errors import SonicError
from ...framework.inference.serving import FLAGS, HELP, METAVAR, ServerOptions, option_fields
from ...framework.settings import LIMITS, Problem

T = TypeVar("T", bound=ServerOptions)


def flag(name: str) -> str:
    """The command-line spelling of a field: ``python_shm_mb`` → ``--python-shm-mb``."""
    return "--" + name.replace("_", "-")


def add_server_flags(parser: argparse.ArgumentParser, cls: type[ServerOptions] = ServerOptions,
                     exclude: Iterable[str] = ()) -> None:
    """One flag per field of :class:`ServerOptions` but ``exclude``, with the defaults of ``cls`` (a subclass such
    as ``FleetSpec`` may choose other defaults) in its help."""
    hints = typing.get_type_hints(ServerOptions)
    defaults = {f.name: f for f in dataclasses.fields(cls)}
    group = parser.add_argument_group("server options (as services.inference.fallback_server keys, with underscores)")
    for f in option_fields():
        if f.name in exclude:
            continue
        kind = _kind(hints[f.name])
        default = _default(defaults[f.name])
        help_text = f.metadata[HELP]
        if "default" not in help_text and default not in (None, False, {}, []):
            help_text += f" (default: {default})"
        settings: dict[str, Any] = {"dest": f.name, "default": None, "help": help_text}
        if kind is bool:
            settings["action"] = "store_true"
        else:
            settings["metavar"] = f.metadata[METAVAR] or {int: "N", float: "S"}.get(kind)
            if kind in (list, dict):
                settings["action"] = "append"
            else:
                settings["type"] = kind
                settings["choices"] = (f.metadata.get(LIMITS) or {}).get("choices")
        group.add_argument(flag(f.name), *f.metadata[FLAGS], **settings)


def given(args: argparse.Namespace, exclude: Iterable[str] = ()) -> dict[str, Any]:
    """The server options given on the command line (``KEY=VALUE`` flags as a mapping), by field name."""
    out = {}
    for f in option_fields():
        value = getattr(args, f.name, None)
        if value is None or f.name in exclude:
            continue
        if typing.get_origin(typing.get_type_hints(ServerOptions)[f.name]) is dict:
            value = dict(_key_value(item, f.name) for item in value)
        out[f.name] = value
    return out


def options_from(args: argparse.Namespace, cls: type[T] = ServerOptions, base: Mapping[str, Any] | None = None,
                 exclude: Iterable[str] = (), **fixed: Any) -> T:
    """``cls`` from the flags given (but ``exclude``, which the command did not offer), laid over ``base`` (a
    configuration's ``fallback_server``) and ``fixed`` (what the command decides itself, such as a fleet's
    repositories); a problem is one line naming the flag."""
    return cls.from_dict({**fixed, **(base or {}), **given(args, exclude)}, error=_flag_error)


def options_table() -> str:
    """Every server option as a Markdown table (key, flag, default, what it does): the docs' list, made from the
    fields so that it cannot drift from them."""
    rows = ["| `fallback_server` key | flag | default | what it does |", "|---|---|---|---|"]
    for f in option_fields():
        default = _default(f)
        shown = "—" if default in (None, {}, []) else f"`{default}`"
        spellings = ", ".join(f"`{s}`" for s in (flag(f.name), *f.metadata[FLAGS]))
        rows.append(f"| `{f.name}` | {spellings} | {shown} | {f.metadata[HELP]} |")
    return "\n".join(rows)


def _flag_error(problem: Problem) -> SonicError:
    if problem.kind == "unknown":
        return SonicError(f"unknown server option {problem.key}{problem.suggestion}")
    return SonicError(f"{flag(problem.key)}: {problem.message}")


def _key_value(item: str, name: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise SonicError(f"{flag(name)}: write KEY=VALUE, not {item!r}")
    return key, value


def _kind(tp: Any) -> type:
    """What argparse reads for a field type: bool (a switch), list or dict (repeatable), else int, float, str.
    A core list (``list[int]``) is read as its text, ``0-7,12``, and parsed by the validator."""
    options = [a for a in typing.get_args(tp) if a is not type(None)] if typing.get_origin(tp) is not None and \
        typing.get_origin(tp) not in (list, dict) else [tp]
    inner = options[0]
    origin = typing.get_origin(inner)
    if origin is list:
        return str if typing.get_args(inner) == (int,) else list
    if origin is dict:
        return dict
    return inner if inner in (bool, int, float) else str


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else None
