"""Where the small libraries this project compiles on first use are kept.

Three are built on the user's machine because no wheel ships them: the preload library that keeps
Triton's python-backend shared memory private (``private_memory.py``), the native onnxruntime backend
(``backends/native/build.py``) and the SONIC transport (``transport/native.py``). All three are found
with :func:`find_cached` and built with :func:`build_cached`, which keep them out of the checkout, in the user's cache
(``$XDG_CACHE_HOME`` or ``~/.cache``), with a private temp folder as the fallback when that is not
writable (read-only homes on batch nodes).

Each onnxruntime upgrade or change of the sources makes a new build; :func:`prune` removes the builds
nobody has used for ``MAX_AGE_DAYS`` (a use marks its entry with :func:`mark_used`), so a user's cache
does not grow with every upgrade.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ...atomic import write_atomically

log = logging.getLogger(__name__)

#: a cached build unused for this long is removed when a new one is made beside it
MAX_AGE_DAYS = 30.0


def library_cache_folders(kind: str) -> list[Path]:
    """Folders for built libraries of ``kind`` ("lib", "native", "transport"), in order of preference."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [Path(base) / "sonic-hep" / kind, Path(tempfile.gettempdir()) / f"sonic-hep-{kind}-{os.getuid()}"]


def find_cached(folders: list[Path], key: str, filename: str) -> Path | None:
    """``<folder>/<key>/<filename>`` from the first of ``folders`` that has it (marked as used), or None."""
    for folder in folders:
        if (folder / key / filename).is_file():
            mark_used(folder / key)
            return folder / key / filename
    return None


def mark_used(entry: Path) -> None:
    """Records that a cached build was used now (its modification time), so :func:`prune` keeps it.
    A cache that is not writable (a read-only home) is simply not marked."""
    try:
        os.utime(entry)
    except OSError:
        pass


def prune(folder: Path, pattern: str, keep: Path, max_age_days: float = MAX_AGE_DAYS) -> list[Path]:
    """Removes the entries of ``folder`` matching ``pattern``, other than ``keep``, unused for ``max_age_days``.

    Called after a new build, so a cache holds the builds in use plus the newest. Removing a library
    that a running server has loaded is harmless (the server keeps its mapping); a build in progress writes into
    its own entry, made just now, which is never old. Returns what was removed; failures are logged, not raised.
    """
    cutoff = time.time() - max_age_days * 86400
    removed = []
    for entry in folder.glob(pattern):
        try:
            if entry == keep or entry.name.startswith(".") or entry.stat().st_mtime >= cutoff:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed.append(entry)
        except OSError as err:
            log.debug("could not remove the old build %s: %s", entry, err)
    if removed:
        log.info("removed %d cached build(s) unused for %g days from %s", len(removed), max_age_days, folder)
    return removed


def build_cached(folders: list[Path], key: str, filename: str, pattern: str, make: Callable[[Path], None]) -> Path:
    """Builds ``<folder>/<key>/<filename>`` in the first of ``folders`` that can be written, and returns it.

    ``make(partial)`` compiles (and checks) the file at ``partial``, a temporary beside the target named after
    its builder (:func:`~sonic_hep.framework.atomic.write_atomically`, which also removes those of builders
    that died); it is then renamed into place, so concurrent builders and readers see the whole file or none,
    and a file that failed its check is never cached. ``make`` writes nothing else beside ``partial``. The
    folder's other builds (``pattern``) unused for ``MAX_AGE_DAYS`` are then pruned. What ``make`` raises passes through, except OSError.

    Raises:
        OSError: no folder could be written (the problems of each, joined).
    """
    problems = []
    for folder in folders:
        target = folder / key / filename
        try:
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomically(target, lambda partial: make(Path(partial)))
            prune(folder, pattern, target.parent)
            return target
        except OSError as err:
            problems.append(f"{folder}: {err}")
    raise OSError("; ".join(problems))


def compile_library(command: list[str], source: str, error: type[Exception],
                    explain: Callable[[str], str | None] = lambda stderr: None) -> None:
    """Runs the compiler ``command`` (its first word) that builds ``source``; a failure raises ``error`` with
    one line: ``explain(stderr)`` when it has one (a missing library, say), else the compiler's first error."""
    name = Path(command[0]).name
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise error(f"{name} took more than 300 s to compile {source}") from None
    if done.returncode != 0:
        first = next((line for line in done.stderr.splitlines() if "error" in line), done.stderr.strip())
        raise error(explain(done.stderr) or f"{name} failed to compile {source}: {first[:300]}")


class BuildOnce:
    """A library found in the cache, or built once per process and settings (key, folders, ``$CXX``).

    A failure (of type ``error``) is remembered and raised again, so a machine without a compiler is not
    asked to compile again by every server or connection a job makes; changed settings build anew.
    """

    def __init__(self, error: type[Exception]):
        self.error = error
        self._lock = threading.Lock()
        self._done: dict[tuple, Path | Exception] = {}

    def get(self, folders: list[Path], key: str, filename: str, build: Callable[[], Path]) -> Path:
        with self._lock:
            found = find_cached(folders, key, filename)
            if found is not None:
                return found
            memo = (key, tuple(folders), os.environ.get("CXX"))
            if memo not in self._done:
                try:
                    self._done[memo] = build()
                except self.error as err:
                    self._done[memo] = err
            result = self._done[memo]
        if isinstance(result, Exception):
            raise result
        return result
