"""Finds module types by name: registered classes, plug-in packages, or ``package.module:Class``.

Plug-in packages are declared as entry points in the group ``sonic_hep.modules`` (the project's own
``sonic_hep.modules`` is one). They are imported, with all their sub-modules, only when a name is not
already known, so a process that uses only built-in modules does not pay for importing every workflow.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
from functools import cache

from .errors import did_you_mean
from .module import Module, registered


_FAILURES: dict[str, str] = {}


@cache
def load_plugins() -> tuple[str, ...]:
    """Imports every plug-in package (and its sub-modules) once; returns the package names.

    A sub-module that fails to import is recorded, not fatal: one broken plug-in must not stop configs
    that do not use it. :func:`lookup` reports the failures when a type is not found.
    """
    names = []
    for entry in importlib.metadata.entry_points(group="sonic_hep.modules"):
        try:
            package = importlib.import_module(entry.value)
        except Exception as err:  # noqa: BLE001 - recorded and reported by lookup()
            _FAILURES[entry.value] = f"{type(err).__name__}: {err}"
            continue
        names.append(entry.value)
        if hasattr(package, "__path__"):
            for info in pkgutil.walk_packages(package.__path__, prefix=package.__name__ + ".",
                                              onerror=lambda name: _FAILURES.setdefault(name, "cannot import")):
                try:
                    importlib.import_module(info.name)
                except Exception as err:  # noqa: BLE001 - recorded and reported by lookup()
                    _FAILURES[info.name] = f"{type(err).__name__}: {err}"
    return tuple(names)


def lookup(type_name: str) -> type[Module]:
    """Returns the module class called ``type_name``, or raises ``KeyError`` with close matches.

    Args:
        type_name (str): a registered class name (``"ParticleNetAK4"``) or ``"package.module:Class"``.
    """
    if ":" in type_name:
        module_name, _, attr = type_name.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as err:
            raise KeyError(f"cannot import module type {type_name!r}: {err}") from None
        if not (isinstance(cls, type) and issubclass(cls, Module)):
            raise KeyError(f"{type_name!r} is not a Module subclass")
        return cls
    known = registered()
    if type_name not in known:
        load_plugins()
        known = registered()
    if type_name not in known:
        failed = "".join(f"; plug-in {name} failed to import ({reason})" for name, reason in _FAILURES.items())
        raise KeyError(f"unknown module type {type_name!r}{did_you_mean(type_name, known)}{failed}")
    return known[type_name]


def all_types() -> dict[str, type[Module]]:
    """Every module type after loading plug-ins, by name (for ``sonic describe`` without argument)."""
    load_plugins()
    return registered()
