"""A task's job folders belong to its jobs: no other writer may put a file there.

``sonic merge T --output T/jobs/0000/output.root`` used to replace a done job's output with the
merged file, and the task could not be repaired afterwards; a hand-run ``sonic run -o`` into a job
folder does the same. :func:`refuse_task_path` says no to both before anything is written. The only
writer allowed there is the job wrapper, for the files of the job it runs (:func:`job_writes`).

A path is inside a task when one of its parents (symbolic links resolved) is a task directory
(it holds ``task.json``) and the path is or lies in its ``jobs/`` or ``logs/`` folder, or is one of
the task's own records (``task.json``, ``config.yaml``), or is the task directory itself.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from .errors import GridError

#: files the job wrapper running in this process may write although they lie in a job folder
_ALLOWED: set[str] = set()
TASK_RECORDS = ("task.json", "config.yaml")
TASK_FOLDERS = ("jobs", "logs")


def _real(path: str | os.PathLike) -> Path:
    return Path(os.path.realpath(os.path.expanduser(os.fspath(path))))


def owning_task(path: str | os.PathLike) -> Path | None:
    """The task directory whose job folders, logs or records hold ``path``; None when it is outside every task.

    Example::

        owning_task("T/jobs/0000/output.root")  # -> Path("/abs/T")
        owning_task("T/merged.root")            # -> None (beside the jobs, not among them)
    """
    real = _real(path)
    if (real / "task.json").is_file():  # the task directory itself
        return real
    if real.name in TASK_RECORDS and (real.parent / "task.json").is_file():
        return real.parent
    for folder in (real, *real.parents):
        if folder.name in TASK_FOLDERS and (folder.parent / "task.json").is_file():
            return folder.parent
    return None


def refuse_task_path(path: str | os.PathLike | None, what: str = "output") -> None:
    """Raises when ``path`` would write into a task's job folders (unless this process runs that job).

    Args:
        path: the file about to be written (None: nothing to check).
        what: how the user named it, for the message (``--output``, ``output.file``).

    Raises:
        GridError: naming the path, the task and what to do instead.
    """
    if not path:
        return
    task = owning_task(path)
    if task is None or str(_real(path)) in _ALLOWED:
        return
    raise GridError(f"{what} {os.fspath(path)!r} lies inside the task {task} (its job folders and records "
                    f"belong to its jobs); write it outside {task / 'jobs'}, e.g. {task.parent / 'merged.root'}")


@contextlib.contextmanager
def job_writes(*paths: str | os.PathLike) -> Iterator[None]:
    """Lets the job wrapper write its own job's files while it runs the job in this process."""
    real = {str(_real(p)) for p in paths}
    added = real - _ALLOWED
    _ALLOWED.update(added)
    try:
        yield
    finally:
        _ALLOWED.difference_update(added)
