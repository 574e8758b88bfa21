"""Optional dependencies behind one import helper that says what to install (uproot's ``extras.py``).

The batch systems, event generators and training need packages that most users never install; they
are the pip extras of ``pyproject.toml``. Importing them through :func:`require` turns a missing one
into a one-line user error naming the extra, instead of a ``ModuleNotFoundError`` traceback, and keeps
the import-name → requirement table in one place (``tests/framework/test_extras.py`` checks it
against ``pyproject.toml``).

Example::

    htcondor2 = require("htcondor2", "the condor executor", SubmitError)
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import SonicError

#: top-level import name → (pip extra of sonic-hep, or None for a core dependency; the requirement as
#: written in pyproject.toml). Import names differ from distribution names (``acts`` is ``pyacts``).
EXTRAS: dict[str, tuple[str | None, str]] = {
    "htcondor2": ("grid", "htcondor>=24.0"),
    "distributed": ("grid", "dask[distributed]>=2024.1"),
    "dask_jobqueue": ("grid", "dask-jobqueue>=0.8"),
    "pythia8mc": ("generators", "pythia8mc==8.317.2"),
    "fastjet": ("generators", "fastjet>=3.4"),
    "acts": ("generators", "pyacts==48.1.0"),
    "torch": ("train", "torch==2.13.0"),
    "pytriton": (None, "nvidia-pytriton>=0.5"),
    "fsspec_xrootd": ("remote", "fsspec-xrootd>=0.5"),
    "XRootD": ("remote", "xrootd>=5.6"),
    "aiohttp": ("remote", "aiohttp>=3.8"),
}


class MissingDependency(SonicError, ModuleNotFoundError):
    """An optional package is not installed; the message names the pip command that installs it.

    Also a ``ModuleNotFoundError``, so code that already tolerates a missing import keeps doing so.
    """


def install_hint(module: str) -> str:
    """The pip command that installs the package providing ``module`` (a top-level import name)."""
    extra, requirement = EXTRAS[module.partition(".")[0]]
    return f"pip install 'sonic-hep[{extra}]'" if extra else f"pip install '{requirement}'"


def require(module: str, purpose: str, error: type[SonicError] = MissingDependency) -> ModuleType:
    """Imports ``module`` or raises ``error`` saying what needs it and how to install it.

    Args:
        module (str): the import name, dotted if needed (``"acts.examples"``); its top level must be in
            :data:`EXTRAS`.
        purpose (str): what needs it, as the subject of a sentence ("the condor executor").
        error (type[SonicError]): the exception to raise, so callers keep their own error type
            (``SubmitError`` for a submission...).

    Returns:
        ModuleType: the imported module.
    """
    top = module.partition(".")[0]
    if top not in EXTRAS:
        raise KeyError(f"{top!r} is not an optional dependency listed in sonic_hep.framework.extras.EXTRAS")
    try:
        return importlib.import_module(module)
    except ImportError as err:
        requirement = EXTRAS[top][1]
        message = f"{purpose} needs {requirement} ({err}): {install_hint(top)}"
        if error is MissingDependency:
            raise MissingDependency(message, name=module) from None
        raise error(message) from None
