"""``sonic merge DIR --output FILE``: the outputs of a finished task as one ROOT file (like ``hadd``).

Refuses while any job is not done or an output does not validate; event trees are concatenated in
job order (so the result equals one run over all inputs), histograms are summed, and the merged
entry count is checked against the sum of the jobs' before the file gets its name.
"""

from __future__ import annotations

import argparse
import sys

from ..grid.merge import merge
from ..grid.task import Task


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("merge", help="merge a finished task's outputs into one ROOT file", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", metavar="DIR", help="the task directory")
    parser.add_argument("--output", "-o", required=True, metavar="FILE", help="the merged ROOT file")
    parser.add_argument("--tree", default="Events", help="the event tree (default: Events)")
    parser.add_argument("--compression", default="zstd:4", help="compression of the merged file (default: zstd:4)")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    task = Task(args.directory)
    entries = merge(task, args.output, tree=args.tree, compression=args.compression)
    print(f"merged {task.njobs} job outputs, {entries} entries, into {args.output}", file=sys.stderr)
    return 0
