"""Errors a grid user can cause: each names the task directory, job or input to fix."""

from __future__ import annotations

import os

from ...framework.errors import SonicError


class GridError(SonicError):
    """A task that cannot be created, submitted, resubmitted or merged as asked."""


class SubmitError(GridError):
    """The batch system refused or could not be reached; names the command or daemon that failed."""


class PartialSubmission(SubmitError):
    """Some jobs were submitted before the batch system refused the rest.

    Args:
        message: what was refused.
        batch_ids: the jobs that were submitted, with their batch ids (they are recorded, not lost).
    """

    def __init__(self, message: str, batch_ids: dict[int, str]):
        super().__init__(message)
        self.batch_ids = batch_ids


class UnwritableRecord(GridError):
    """A task's record (``state.json``, ``submit.json``, ``task.json`` ...) or a job's log could not be written:
    a full disk, a quota, a read-only folder. Names the file and the system's reason.

    Args:
        path: the file.
        reason: the system's words (``No space left on device``).
    """

    def __init__(self, path: str | os.PathLike, reason: str):
        self.path, self.reason = str(path), reason
        super().__init__(f"cannot write {self.path}: {reason}")


class IncompleteTask(GridError):
    """``merge`` found jobs that are not done (or whose output does not validate)."""
