"""Finds module types by name: registered classes, plug-in packages, users' own files, ``package.module:Class``.

Three ways a module class reaches a configuration:

* **Plug-in packages** (installed): entry points in the group ``sonic_hep.modules`` (the project's own
  ``sonic_hep.modules`` is one). They are imported, with all their sub-modules, only when a name is not
  already known, so a process that uses only built-in modules does not pay for importing every workflow.
* **A user's own file, no packaging**: ``imports: [my_analysis]`` at the top of a configuration imports
  ``my_analysis.py`` (or the package ``my_analysis/``) from the configuration's folder, else from
  ``PYTHONPATH``; its classes are then known by name (``type: JetPtSum``). ``type: my_analysis.JetPtSum``
  does the same for one class without the ``imports`` line. See :func:`import_user_module`.
* ``package.module:Class``: any importable class, spelled out.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import pkgutil
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

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


#: top-level names imported from users' configuration folders (another folder's file of the same name may
#: replace one; an installed module may not be replaced)
_USER_MODULES: set[str] = set()


class UserModuleError(KeyError):
    """A user's module file that cannot be found or imported; the message is one line naming it."""

    def __str__(self) -> str:
        return str(self.args[0])


def _top_level_in(name: str, folder: Path) -> bool:
    top = name.split(".")[0]
    return (folder / f"{top}.py").is_file() or (folder / top / "__init__.py").is_file()


def _forget(name: str) -> None:
    """Drops an imported module of that top-level name (and its sub-modules), e.g. a same-named file of
    another folder imported earlier in this process, so the import finds the one asked for."""
    top = name.split(".")[0]
    for key in [k for k in sys.modules if k == top or k.startswith(top + ".")]:
        del sys.modules[key]


def import_user_module(name: str, folder: str | os.PathLike | None = None) -> ModuleType:
    """Imports a user's module by name or path; its Module subclasses register themselves by class name.

    Args:
        name (str): ``"my_analysis"`` (``my_analysis.py`` or package ``my_analysis/``), a dotted
            ``"mylib.cuts"``, or a path to a ``.py`` file (``"lib/cuts.py"``, relative to ``folder``).
        folder: where the configuration is; looked in first, then ``PYTHONPATH``/``sys.path``.

    Returns:
        ModuleType: the imported module. The folder that holds it stays on ``sys.path``, so the file
        may import its neighbours.

    Raises:
        UserModuleError: not found, or its import failed (one line: name, file, the error and its line).
    """
    base = Path(folder).resolve() if folder else Path.cwd()
    text = str(name).strip()
    if text.endswith(".py") or "/" in text or os.sep in text:
        path = (base / text).resolve()
        if path.is_dir() and (path / "__init__.py").is_file():  # a package folder
            base, text = path.parent, path.name
        elif path.is_file():
            base, text = path.parent, path.stem
        else:
            raise UserModuleError(f"module file {text!r} not found (looked for {path})")
    if not text.replace(".", "_").isidentifier():
        raise UserModuleError(f"{text!r} is not a Python module name (my_analysis, mylib.cuts or a .py path)")
    where = None
    if _top_level_in(text, base):
        where = str(base)
        top = text.split(".")[0]
        loaded = sys.modules.get(top)
        origin = getattr(loaded, "__file__", None) or ""
        if loaded is not None and not origin.startswith(where + os.sep):
            if top not in _USER_MODULES:  # replacing numpy or json under everyone's feet would break the job
                # refused before the folder goes on sys.path: processes started later (multiprocessing, Dask
                # workers) inherit sys.path, and would import this file instead of the real module
                raise UserModuleError(f"{top}.py in {where} has the name of a module already imported from "
                                      f"{origin or 'the interpreter'}; rename your file")
            _forget(text)  # a same-named user file of another configuration, imported earlier in this process
        if where in sys.path:
            sys.path.remove(where)
        sys.path.insert(0, where)  # first: a file next to the configuration wins over an installed namesake
        _USER_MODULES.add(top)
    try:
        return importlib.import_module(text)
    except ModuleNotFoundError as err:
        if err.name and text.startswith(err.name) and where is None:
            raise UserModuleError(f"module {text!r} not found: no {text.split('.')[0]}.py or package "
                                  f"{text.split('.')[0]}/ in {base}, and not importable from PYTHONPATH") from None
        raise UserModuleError(f"importing {text!r} failed: {_describe(err)}") from None
    except Exception as err:  # noqa: BLE001 - a user's file: any error, named with its file and line
        raise UserModuleError(f"importing {text!r} failed: {_describe(err)}") from None


def _describe(err: BaseException) -> str:
    """``Type: message (file, line N)`` of an error raised while importing user code."""
    if isinstance(err, SyntaxError):
        return f"SyntaxError: {err.msg} ({err.filename}, line {err.lineno})"
    tb = err.__traceback__
    frame = None
    while tb is not None:
        frame = tb
        tb = tb.tb_next
    place = f" ({frame.tb_frame.f_code.co_filename}, line {frame.tb_lineno})" if frame is not None else ""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}{place}"


def user_types(module: ModuleType) -> dict[str, type[Module]]:
    """The Module subclasses defined in ``module`` (not the ones it imported), by class name."""
    return {name: cls for name, cls in vars(module).items()
            if isinstance(cls, type) and issubclass(cls, Module) and cls.__module__ == module.__name__
            and not getattr(cls, "__abstractmethods__", None)}


def lookup(type_name: str, folder: str | os.PathLike | None = None) -> type[Module]:
    """Returns the module class called ``type_name``, or raises ``KeyError`` with close matches.

    Args:
        type_name (str): a registered class name (``"ParticleNetAK4"``), a user's ``"my_analysis.JetPtSum"``
            (the module imported as by :func:`import_user_module`) or ``"package.module:Class"``.
        folder: the configuration's folder, where ``my_analysis.py`` is looked for first.
    """
    if ":" not in type_name and "." in type_name:
        module_name, _, attr = type_name.rpartition(".")
        module = import_user_module(module_name, folder)
        cls = getattr(module, attr, None)
        if not (isinstance(cls, type) and issubclass(cls, Module)):
            known = user_types(module)
            what = "has no class" if cls is None else "has no Module subclass"
            raise KeyError(f"{module_name!r} ({getattr(module, '__file__', '?')}) {what} {attr!r}"
                           f"{did_you_mean(attr, known)}; its module types: {sorted(known) or 'none'}")
        return cls
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
        raise KeyError(f"unknown module type {type_name!r}{did_you_mean(type_name, known)}{failed} (a class in "
                       f"your own file: list the file under imports, or write type: file.{type_name})")
    return known[type_name]


def all_types() -> dict[str, type[Module]]:
    """Every module type after loading plug-ins, by name (for ``sonic describe`` without argument)."""
    load_plugins()
    return registered()


def import_user_modules(names: list[str], folder: str | os.PathLike | None) -> list[str]:
    """Imports a configuration's ``imports`` (see :func:`import_user_module`); returns them as a job elsewhere
    must import them: a module found in ``folder`` as its absolute path (a grid job runs from its task
    folder, which holds a copy of the configuration but not the user's file), anything else as given.

    Raises:
        UserModuleError: the first entry that cannot be found or imported.
    """
    base = Path(folder).resolve() if folder else Path.cwd()
    resolved = []
    for name in names:
        module = import_user_module(name, base)
        where = getattr(module, "__file__", None)
        local = where is not None and "." not in name.removesuffix(".py") and Path(where).resolve().is_relative_to(base)
        if local and Path(where).name == "__init__.py":
            resolved.append(str(Path(where).resolve().parent))
        elif local or name.endswith(".py") or "/" in name:
            resolved.append(str(Path(where).resolve()) if where else name)
        else:
            resolved.append(name)
    return resolved


def user_file(type_name: str, folder: str | os.PathLike | None) -> str | None:
    """For ``type: my_analysis.JetPtSum``: the absolute path of ``my_analysis.py`` (or package) in ``folder``,
    if it is there (so a grid job can import it from its own folder), else None."""
    module_name = type_name.rpartition(".")[0]
    if ":" in type_name or not module_name or "." in module_name:
        return None
    base = Path(folder).resolve() if folder else Path.cwd()
    for candidate in (base / f"{module_name}.py", base / module_name):
        if candidate.is_file() or (candidate / "__init__.py").is_file():
            return str(candidate)
    return None
