"""Splitting a task into jobs: groups of files, or entry ranges over the files' concatenation.

Pure functions on file names and entry counts, so they are tested without any file. A job's
``first_entry``/``max_events`` count over the concatenation of *its own* input files, which is what
``sonic run --first-entry N --max-events M`` means; jobs in index order cover the task's entries
in order, exactly once, so the merged output equals one process run over all inputs.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field

from .errors import GridError


@dataclass(frozen=True)
class JobSpec:
    """What one job processes.

    Args:
        index: the job number in the task (0-based; array index on batch systems).
        inputs: its input files (empty for a generator task: ``source.type: empty``).
        first_entry: entries to skip over the concatenation of ``inputs``.
        max_events: entries to process (-1: all).
        expected_events: entries it must process, when the splitting counted them.
    """

    index: int
    inputs: tuple[str, ...] = field(default_factory=tuple)
    first_entry: int = 0
    max_events: int = -1
    expected_events: int | None = None


def by_files(files: list[str], files_per_job: int) -> list[JobSpec]:
    """``files_per_job`` consecutive files per job (the last job may have fewer)."""
    if files_per_job < 1:
        raise GridError(f"--files-per-job must be at least 1, got {files_per_job}")
    groups = [tuple(files[i:i + files_per_job]) for i in range(0, len(files), files_per_job)]
    return [JobSpec(index=i, inputs=group) for i, group in enumerate(groups)]


def by_events(files: list[str], entries: list[int], events_per_job: int, first_entry: int = 0,
              max_events: int = -1) -> list[JobSpec]:
    """Entry ranges of ``events_per_job`` over the files' concatenation, from ``first_entry`` for
    ``max_events`` entries (-1: to the end); each job lists only the files its range touches.

    Example::

        by_events(["a.root", "b.root"], [150, 90], 100)
        # job 0: a.root entries 0-99; job 1: a.root 100-149 + b.root 0-49; job 2: b.root 50-89
    """
    if events_per_job < 1:
        raise GridError(f"--events-per-job must be at least 1, got {events_per_job}")
    if len(files) != len(entries):
        raise ValueError("one entry count per file is needed")
    offsets = [0, *itertools.accumulate(entries)]
    total = offsets[-1]
    stop = total if max_events < 0 else min(total, first_entry + max_events)
    jobs = []
    for index, lo in enumerate(range(first_entry, stop, events_per_job)):
        hi = min(lo + events_per_job, stop)
        first_file = bisect.bisect_right(offsets, lo) - 1
        last_file = bisect.bisect_left(offsets, hi) - 1
        chosen = [i for i in range(first_file, last_file + 1) if entries[i] > 0]
        jobs.append(JobSpec(index=index, inputs=tuple(files[i] for i in chosen),
                            first_entry=lo - offsets[chosen[0]], max_events=hi - lo, expected_events=hi - lo))
    return jobs


def generated(events: int, events_per_job: int, first_entry: int = 0, max_events: int = -1) -> list[JobSpec]:
    """Jobs for a generator task (``source.type: empty``): event numbers split into ranges."""
    if events_per_job < 1:
        raise GridError(f"--events-per-job must be at least 1, got {events_per_job}")
    stop = events if max_events < 0 else min(events, first_entry + max_events)
    return [JobSpec(index=i, first_entry=lo, max_events=min(events_per_job, stop - lo),
                    expected_events=min(events_per_job, stop - lo))
            for i, lo in enumerate(range(first_entry, stop, events_per_job))]
