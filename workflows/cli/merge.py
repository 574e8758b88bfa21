"""``sonic merge DIR --output FILE``: the outputs of a finished task as one ROOT file (like ``hadd``).

Refuses while any job is not done or an output does not validate; event trees are concatenated in
job order (so the result equals one run over all inputs), histograms are summed, and the merged
entry count is checked against the sum of the jobs' before the file gets its name. An existing FILE
is replaced only with ``--force`` (as ``hadd -f``); it stays as it was until the new file is complete.
Without ``--force`` that holds also for a FILE that appears while the merge runs: of two merges into one
name, one writes it and the other fails, naming it.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..grid.errors import GridError
from ..grid.merge import check_target, merge
from ..grid.task import Task


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("merge", help="merge a finished task's outputs into one ROOT file", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", metavar="DIR", help="the task directory")
    parser.add_argument("--output", "-o", required=True, metavar="FILE", help="the merged ROOT file")
    parser.add_argument("--force", "-f", action="store_true", help="replace FILE if it exists (as hadd -f)")
    parser.add_argument("--tree", default="Events", help="the event tree (default: Events)")
    parser.add_argument("--compression", default="zstd:4", help="compression of the merged file (default: zstd:4)")
    parser.set_defaults(func=main)


def refuse_existing(output: str, force: bool) -> None:
    """A merged file never replaces an existing one silently: a merge hours after the first, into the
    same name, would otherwise destroy a result without a word.

    Raises:
        GridError: ``output`` exists and ``force`` is not set; one line naming it and the way out.
    """
    if not force and os.path.lexists(output):
        raise GridError(f"merge --output {output!r} exists; remove it or give --force to replace it")


def main(args: argparse.Namespace) -> int:
    task = Task(args.directory)
    check_target(task, args.output)  # first: a task input or a directory is refused for what it is
    refuse_existing(args.output, args.force)
    replaced = " (replaced)" if os.path.lexists(args.output) else ""
    entries = merge(task, args.output, tree=args.tree, compression=args.compression, replace=args.force)
    print(f"merged {task.njobs} job outputs, {entries} entries, into {args.output}{replaced}", file=sys.stderr)
    return 0
