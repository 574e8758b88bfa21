"""``sonic status DIR``: each job's state (pending, running, done, failed with the reason and the log's
last lines) and a summary of the jobs' timing (events/s, CPU per event, wait on inference).

A done job whose output changed since it was marked done (removed, rewritten, corrupted) is listed
as failed with what changed; ``--verify`` recomputes every done output's sha256 to find changes that
kept the file's size and time.

Exit status: 0 when no job has failed, 1 when some have (or the task cannot be read).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..grid import status as grid_status
from ..grid.task import Task


def follow(task: Task, timeout: float | None, interval: float = 1.0) -> int:
    """Waits until no job is pending or running, printing each change of the counts; then the table of every job."""

    def progress(counts: dict[str, int]) -> None:
        print("  " + ", ".join(f"{n} {state}" for state, n in counts.items() if n), file=sys.stderr, flush=True)

    statuses = grid_status.wait(task, interval=interval, timeout=timeout, progress=progress)
    print(grid_status.table(task, statuses))  # every job, as `sonic status` shows them
    return 1 if any(s.state == "failed" for s in statuses) else 0


def count(text: str) -> int:
    """A number of lines: 0 or more (argparse reports anything else as a usage error)."""
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("status", help="state of a task's jobs, with failure reasons and timing",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", metavar="DIR", help="the task directory (--output-dir of sonic submit)")
    parser.add_argument("--json", action="store_true", help="print the states and the timing summary as JSON")
    parser.add_argument("--failed", action="store_true", help="list only jobs that are not done")
    parser.add_argument("--log-lines", type=count, default=8, metavar="N", help="log lines shown per failed job")
    parser.add_argument("--verify", action="store_true",
                        help="recompute each done output's sha256 against the one recorded when it was marked done")
    parser.add_argument("--wait", action="store_true", help="wait until no job is pending or running")
    parser.add_argument("--timeout", type=float, metavar="S", help="with --wait: give up after S seconds")
    parser.add_argument("--interval", type=float, default=1.0, metavar="S", help="with --wait: poll every S seconds")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    task = Task(args.directory)
    if args.wait:
        grid_status.wait(task, interval=args.interval, timeout=args.timeout)
    statuses, warnings = grid_status.collect(task, log_lines=args.log_lines, verify=args.verify)
    for warning in warnings:
        print(f"sonic: warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps({"task": str(task.directory), "counts": grid_status.counts(statuses),
                          "jobs": [s.as_dict() for s in statuses],
                          "timing": grid_status.timing_summary(statuses)}, indent=1, default=str))
    else:
        print(grid_status.table(task, statuses, show_all=not args.failed))
    return 1 if any(s.state == "failed" for s in statuses) else 0
