"""A job's state, decided from two witnesses by one table, so it is tested without any batch system.

The job reports about itself (``state.json``: running, done, failed); the batch system says whether
it still knows the job (pending, running, ended, or it cannot tell). Neither alone is enough: a job
killed by ``scancel``, ``kill -9`` or a dead node never reports, and a batch system forgets finished
jobs. The table below combines them; every pair is listed, so nothing is decided by accident.

States: ``new`` (never submitted) → ``pending`` → ``running`` → ``done`` | ``failed``;
``failed`` → ``pending`` again by ``resubmit`` while retries are left. ``done`` is final: a validated
output is never resubmitted or overwritten — unless it changed after the job was marked done
(removed, rewritten, corrupted; see ``integrity``): ``status`` then reports the job ``failed`` with
what changed, since that output is no longer the job's, and ``resubmit`` redoes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

State = Literal["new", "pending", "running", "done", "failed"]
BatchState = Literal["pending", "running", "ended", "unknown"]
#: the state a job writes in its record (``records.JobRecord.state``)
RecordState = Literal["running", "done", "failed"]
#: what :func:`resolve` is told of a job: its record's state, or "none" while it has written no record
Reported = Literal["none", RecordState]

STATES: tuple[State, ...] = ("new", "pending", "running", "done", "failed")


@dataclass(frozen=True)
class BatchStatus:
    """What the batch system says of one job, with its own words (``CANCELLED``, ``held: ...``)."""

    state: BatchState
    detail: str = ""


UNKNOWN = BatchStatus("unknown")

#: (what the job reported, what the batch system says) → the job's state; None as reason: keep the report's
RESOLVE: dict[tuple[Reported, BatchState], tuple[State, str | None]] = {
    ("none", "pending"): ("pending", ""),
    ("none", "running"): ("running", ""),       # started, the wrapper has not written yet
    ("none", "unknown"): ("pending", ""),
    ("none", "ended"): ("failed", "ended before the job started"),
    ("running", "pending"): ("running", ""),    # requeued by the batch system: it will report again
    ("running", "running"): ("running", ""),
    ("running", "unknown"): ("running", ""),
    ("running", "ended"): ("failed", "killed: ended without reporting"),
    ("done", "pending"): ("done", None),
    ("done", "running"): ("done", None),        # the wrapper is exiting
    ("done", "unknown"): ("done", None),
    ("done", "ended"): ("done", None),
    ("failed", "pending"): ("failed", None),    # e.g. HTCondor retrying: its next start reports running
    ("failed", "running"): ("failed", None),
    ("failed", "unknown"): ("failed", None),
    ("failed", "ended"): ("failed", None),
}

#: allowed moves (what submit/resubmit may do)
MOVES: dict[State, frozenset[State]] = {
    "new": frozenset({"pending"}),
    "pending": frozenset({"running", "failed"}),
    "running": frozenset({"done", "failed"}),
    "failed": frozenset({"pending"}),
    "done": frozenset(),
}


def resolve(submitted: bool, reported: Reported, batch: BatchStatus, report_reason: str = "") -> tuple[State, str]:
    """The job's state and the reason shown for it.

    Args:
        submitted: whether the job was ever handed to a batch system.
        reported: the current attempt's own report (``none`` before it started).
        batch: the batch system's view of the current attempt.
        report_reason: the reason the job reported (kept for done/failed reports).
    """
    if not submitted:
        return "new", ""
    state, reason = RESOLVE[(reported, batch.state)]
    if reason is None:
        return state, report_reason
    if reason and batch.detail:
        reason = f"{reason} ({batch.detail})"
    elif not reason and batch.detail and state == "pending":
        reason = batch.detail
    return state, reason


def can_move(old: State, new: State) -> bool:
    """Whether ``old → new`` is an allowed move."""
    return new in MOVES[old]
