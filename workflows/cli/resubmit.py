"""``sonic resubmit DIR``: submit the task's failed jobs again (never done ones), while retries are left.

Each job is tried at most 1 + max-retries times (the limit given at submission, or ``--max-retries``).
Its earlier attempts stay in ``jobs/NNNN/submit.json``; a partial or rejected output is removed first.
"""

from __future__ import annotations

import argparse
import sys

from ..grid import executors
from ..grid.submit import describe, resubmit
from ..grid.task import Task
from .status import follow
from .submit import add_execution_arguments, executor_epilog


def _indices(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return out


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("resubmit", help="submit a task's failed jobs again", description=__doc__,
                            epilog=executor_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", metavar="DIR", help="the task directory")
    parser.add_argument("--jobs", type=_indices, metavar="LIST", help="only these jobs, e.g. 3,7-9 (must be failed)")
    parser.add_argument("--max-retries", type=int, metavar="R",
                        help="resubmissions allowed per job (default: as submitted)")
    add_execution_arguments(parser, None)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    task = Task(args.directory)
    options = executors.parse_key_values(args.executor_option) if args.executor_option else None
    outcome = resubmit(task, jobs=args.jobs, executor=args.executor, options=options, max_running=args.max_running,
                       max_retries=args.max_retries)
    print(describe(outcome), file=sys.stderr)
    for index, reason in outcome.skipped.items():
        print(f"  job {index}: not resubmitted: {reason}", file=sys.stderr)
    if args.wait and outcome.submitted:
        return follow(outcome.task, args.timeout)
    return 0
