"""The two records of a job, each written by one party, so no two processes write the same file.

* ``submit.json`` — written by ``submit``/``resubmit`` only: the attempt number, the executor, the
  batch system's id, and the history of earlier attempts. It is written *before* the job is handed
  to the batch system, so a job that starts at once already finds its attempt number.
* ``state.json`` — written by the job itself (and by a local driver when the job was killed): what
  the current attempt reports — ``running``, then ``done`` after its output validated, or ``failed``
  with a reason.

Both are replaced atomically (:func:`~sonic_hep.framework.atomic.write_atomically`: a temporary named after
its writer, then a rename), so a reader never sees half a record, and the temporary of a writer killed
mid-write is removed by the next write of that record.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...framework.atomic import write_atomically
from .errors import GridError, UnwritableRecord
from .lifecycle import RecordState


def write_json(path: str | os.PathLike, data: Any) -> None:
    """Writes JSON atomically: a reader sees the old or the new content, never a part.

    Raises:
        UnwritableRecord: naming the file, when the system refuses the write (a task folder that filled up,
            a quota, a read-only folder); the old content stays and no temporary is left behind.
    """
    text = json.dumps(data, indent=1, default=str) + "\n"

    def fill(temporary: str) -> None:
        with open(temporary, "w", encoding="utf-8") as stream:
            stream.write(text)

    try:
        write_atomically(path, fill)
    except OSError as err:
        raise UnwritableRecord(path, err.strerror or str(err)) from None


#: free bytes below which a record (a few KiB, written whole) may not fit: a folder this full counts as full
FULL_BYTES = 64 * 1024


def why_unwritable(folder: str | os.PathLike) -> str | None:
    """Why records cannot be written in ``folder`` now — its file system is read-only, full or out of inodes —
    or None. ``status`` asks it of a job that ended without a final report: a job on a full disk cannot
    report, and its batch system (or driver) only knows that it ended."""
    try:
        fs = os.statvfs(folder)
    except OSError:
        return None
    if fs.f_flag & os.ST_RDONLY:
        return f"the file system of {folder} is read-only"
    free = fs.f_bavail * fs.f_frsize
    if free < FULL_BYTES:
        return f"the file system of {folder} is full ({free} bytes free)"
    if fs.f_files and not fs.f_favail:
        return f"the file system of {folder} has no free inodes"
    return None


def read_json(path: str | os.PathLike) -> Any | None:
    """The JSON content of ``path``, or None when the file does not exist.

    Raises:
        GridError: naming the file, when it is not JSON (a record edited by hand or cut short by a full disk).
    """
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise GridError(f"{path} is not a readable record ({err}); restore or remove it") from None


@dataclass
class Submission:
    """``submit.json``: the current attempt of a job and where it went.

    Args:
        attempt: 1 for the first submission, +1 for each resubmission.
        executor: executor name (``local``, ``slurm``, ``condor``, ``dask``).
        options: the executor options it was submitted with.
        batch_id: the batch system's id (``1234_7`` for a Slurm array task); None until it answered.
        submitted: UNIX time of the submission.
        history: ``state.json`` contents of earlier attempts (for ``status`` and post-mortems).
    """

    attempt: int
    executor: str
    options: dict[str, Any] = field(default_factory=dict)
    batch_id: str | None = None
    submitted: float = field(default_factory=time.time)
    history: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Submission | None:
        data = read_json(path)
        return None if data is None else cls(**data)

    def save(self, path: str | os.PathLike) -> None:
        write_json(path, asdict(self))


@dataclass
class JobReport:
    """``state.json``: what the job's current attempt reported about itself.

    Args:
        attempt: the attempt this report belongs to (a report of an older attempt is ignored).
        state: ``running``, ``done`` (output validated) or ``failed``.
        reason: why it failed (the error message, the signal, the unreadable input).
        exit_code: the job's exit status (negative: killed by that signal).
        bad_inputs: input files that could not be read, each with its error.
        events, written: events processed and written (done jobs).
        timing: summary of the job's timing report (events/s, CPU, wait on inference).
        sha256, output_bytes, output_mtime_ns: the output as it was when the job was marked done
            (``integrity`` compares them later: merge refuses, status reports an output changed since).
        sandbox: the job ran in an HTCondor sandbox (its inputs were transferred copies).
    """

    attempt: int
    state: RecordState
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    batch_id: str | None = None
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    reason: str = ""
    bad_inputs: list[str] = field(default_factory=list)
    events: int | None = None
    written: int | None = None
    output_bytes: int | None = None
    timing: dict[str, Any] = field(default_factory=dict)
    sha256: str | None = None
    output_mtime_ns: int | None = None
    sandbox: bool = False

    @classmethod
    def load(cls, path: str | os.PathLike) -> JobReport | None:
        data = read_json(path)
        return None if data is None else cls(**data)

    def save(self, path: str | os.PathLike) -> None:
        write_json(path, asdict(self))
