"""``sonic submit CONFIG --input FILES --output-dir DIR``: split a workflow into jobs and run them on a
batch system — a local process pool (default), Slurm job arrays, HTCondor, or a Dask cluster.

Jobs are groups of files (``--files-per-job``) or entry ranges (``--events-per-job``). DIR becomes a
self-describing task directory: the configuration, each job's inputs and exact ``sonic run``
command, its state, log, timing and output. Submitting again into DIR continues the same task (jobs
never submitted are submitted; finished outputs are never touched). Follow with ``sonic status
DIR``, retry failures with ``sonic resubmit DIR``, and combine with ``sonic merge DIR --output FILE``.

Examples::

    sonic submit configs/miniaod.yaml --input 'data/*.root' --output-dir task --files-per-job 2
    sonic submit miniaod --input files.txt --output-dir task --executor slurm -E partition=short \\
        --events-per-job 5000 --max-running 600 --inference sonic --server gpu1:8001 --server gpu2:8001
"""

from __future__ import annotations

import argparse
import sys

from ..grid import executors
from ..grid.submit import SubmitRequest, describe, submit
from .run import add_process_arguments, fleet_overrides
from .status import follow


def executor_epilog() -> str:
    lines = ["executor options (-E key=value):"]
    for name in executors.names():
        lines += [f"  {name}:", executors.option_help(executors.executor_class(name))]
    return "\n".join(lines)


def add_execution_arguments(parser: argparse.ArgumentParser, default_executor: str | None) -> None:
    """Options shared by submit and resubmit: where and how many jobs run."""
    parser.add_argument("--executor", "-x", default=default_executor, choices=executors.names(),
                        help="where jobs run" + (f" (default: {default_executor})" if default_executor else
                                                 " (default: as submitted)"))
    parser.add_argument("-E", "--executor-option", action="append", default=[], metavar="KEY=VALUE",
                        help="an executor option (see below), e.g. -E partition=short")
    parser.add_argument("--max-running", type=int, metavar="N", help="at most N jobs running at once")
    parser.add_argument("--wait", action="store_true", help="wait until every job has ended, then show the status")
    parser.add_argument("--timeout", type=float, metavar="S", help="with --wait: give up after S seconds")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("submit", help="split a workflow into jobs and submit them (local, slurm, condor, dask)",
                            description=__doc__, epilog=executor_epilog(),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_process_arguments(parser)
    parser.add_argument("--input", "-i", nargs="+", metavar="FILE",
                        help="ROOT files, globs, or file lists (*.txt, *.list, @list) (default: source.files)")
    parser.add_argument("--output-dir", "-d", required=True, metavar="DIR", help="the task directory")
    split = parser.add_mutually_exclusive_group()
    split.add_argument("--files-per-job", type=int, metavar="K", help="K input files per job (default: 1)")
    split.add_argument("--events-per-job", type=int, metavar="N", help="N entries per job (entry ranges)")
    add_execution_arguments(parser, "local")
    parser.add_argument("--max-retries", type=int, default=3, metavar="R",
                        help="resubmissions allowed per failed job (default: 3)")
    parser.add_argument("--inference", choices=("direct", "sonic", "auto"),
                        help="inference mode of every job (auto: direct on a GPU the job sees, else sonic)")
    parser.add_argument("--fleet", metavar="DIR",
                        help="every job uses the servers of this fleet (sonic fleet start DIR), found in DIR")
    parser.add_argument("--server", action="append", default=[], metavar="HOST:PORT",
                        help="a Triton server for --inference sonic (repeatable)")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.fleet:
        from ..grid.fleet import Fleet

        Fleet(args.fleet)  # refused here, before the task is written, when DIR holds no fleet
    overrides = args.param + fleet_overrides(args.fleet, args.inference)
    request = SubmitRequest(config=args.config, output_dir=args.output_dir, inputs=args.input, overrides=overrides,
                            files_per_job=args.files_per_job, events_per_job=args.events_per_job,
                            executor=args.executor, executor_options=executors.parse_key_values(args.executor_option),
                            max_running=args.max_running, max_retries=args.max_retries, inference=args.inference,
                            servers=args.server)
    outcome = submit(request)
    if args.fleet:
        Fleet(args.fleet).add_task(outcome.task.directory)
    print(describe(outcome), file=sys.stderr)
    if args.wait:
        return follow(outcome.task, args.timeout)
    return 0
