"""``sonic run CONFIG``: process events with a workflow configuration (like ``cmsRun``)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from ...framework import config as cfgmod
from ...framework.process import Process, Stop


def add_process_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that runs or inspects a configuration.

    CONFIG may also come after ``--input`` files (``sonic run -i f.root miniaod``) where the parser is the
    command line's (:class:`Parser`, see :func:`config_after_inputs`); a plain argparse parser (a grid job
    runs ``sonic run`` with one) keeps CONFIG a plain required positional."""
    help_text = "a YAML process configuration, or the name of a shipped one (e.g. miniaod)"
    checks = getattr(parser, "after_parse", None)
    if checks is None:
        parser.add_argument("config", help=help_text)
    else:
        config = parser.add_argument("config", nargs="?", help=help_text)
        config.shown_required = True  # type: ignore[attr-defined] - config_after_inputs requires it
        checks.append(config_after_inputs)
    parser.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                        help="override any setting: module.param=value, source.max_events=10, "
                             "services.inference.mode=sonic ...")


def config_after_inputs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """CONFIG written after ``--input`` files (``sonic run -i a.root b.root miniaod``) is the last word of the
    list, which argparse hands to ``--input`` (it takes one or more words): it becomes CONFIG again, as with
    ``cp a b DIR``, when it reads as one (a ``.yaml``/``.yml`` file or a shipped configuration's name); an
    input (``f.root``, ``files.txt``, a glob) stays an input, and CONFIG is missing."""
    if args.config is not None:
        return
    inputs = getattr(args, "input", None) or []
    if len(inputs) > 1 and _is_config(inputs[-1]):
        args.config = inputs.pop()
    if args.config is None:
        parser.error("the following arguments are required: config")


def _is_config(word: str) -> bool:
    """A YAML file, or the name of a shipped configuration (``miniaod``)."""
    return word.lower().endswith((".yaml", ".yml")) or cfgmod.resolve_config_path(word) != word


def overrides_from(args: argparse.Namespace) -> list[str]:
    """The ``-p`` overrides plus the dedicated options, as ``key=value`` strings."""
    overrides = list(args.param)
    if getattr(args, "input", None):
        overrides.append("source.files=[" + ", ".join(_quote(f) for f in args.input) + "]")
    if getattr(args, "output", None):
        overrides.append(f"output.file={_quote(args.output)}")
    for option, key in (("max_events", "source.max_events"), ("first_entry", "source.first_entry"),
                        ("streams", "options.streams"), ("threads", "options.threads")):
        value = getattr(args, option, None)
        if value is not None:
            overrides.append(f"{key}={value}")
    if getattr(args, "inference", None):
        overrides.append(f"services.inference.mode={args.inference}")
    overrides += fleet_overrides(getattr(args, "fleet", None), getattr(args, "inference", None))
    if getattr(args, "server", None):
        overrides.append("services.inference.servers=[" + ", ".join(_quote(s) for s in args.server) + "]")
    return overrides


def fleet_overrides(fleet: str | None, inference: str | None) -> list[str]:
    """``--fleet DIR``: servers found in the fleet directory (absolute: jobs run elsewhere); SONIC unless
    ``--inference`` says otherwise (``auto`` keeps a visible GPU direct)."""
    if not fleet:
        return []
    import os

    return [f"services.inference.fleet={_quote(os.path.abspath(fleet))}"] + \
        ([] if inference else ["services.inference.mode=sonic"])


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("run", help="run a workflow over events", description=__doc__)
    add_process_arguments(parser)
    parser.add_argument("--input", "-i", nargs="+", metavar="FILE", help="input ROOT files or globs (replace source.files)")
    parser.add_argument("--output", "-o", metavar="FILE", help="output ROOT file (replaces output.file)")
    parser.add_argument("--max-events", "-n", type=int, help="process at most N events")
    parser.add_argument("--first-entry", type=int, help="skip the first N entries of the input")
    parser.add_argument("--streams", "-s", type=int, help="events in flight at once")
    parser.add_argument("--threads", "-t", type=int, help="worker threads")
    parser.add_argument("--inference", choices=("direct", "sonic", "auto"),
                        help="run models in-process (direct), on Triton servers (sonic), or auto: direct on a GPU "
                             "this job sees, else sonic (the timing report says which)")
    parser.add_argument("--fleet", metavar="DIR",
                        help="use the servers of a fleet (sonic fleet start DIR), found in DIR as they join and leave")
    parser.add_argument("--server", action="append", metavar="HOST:PORT",
                        help="a Triton server for --inference sonic (repeatable); none: a local one is started")
    parser.add_argument("--timing-json", metavar="FILE", help="write the timing report as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--quiet", "-q", action="store_true", help="do not print the timing table")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    with stop_on_signals():
        return _run(args)


#: signals that stop a job cleanly (exit 128 + the signal): Ctrl-C, a batch system's or ``timeout``'s stop,
#: a closed terminal
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM (a batch system's or ``timeout``'s stop) and SIGHUP end the job like Ctrl-C: the output is
    discarded and every server the job started is stopped. A repeated signal while stopping is ignored, so
    the clean-up itself is not cut short (SIGKILL still ends everything at once)."""

    def stopping(signum: int, frame: Any) -> None:
        """Not SIG_IGN: an ignored signal would stay ignored in any process started while stopping."""

    def stop(signum: int, frame: Any) -> None:
        for sig in previous:  # `timeout` signals the child and then its group: twice
            signal.signal(sig, stopping)
        raise Stop(signum)

    if threading.current_thread() is not threading.main_thread():  # handlers belong to the main thread
        yield
        return
    # a signal ignored when we started (``nohup``, a background job of a script) stays ignored
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS if signal.getsignal(sig) != signal.SIG_IGN}
    for sig in previous:
        signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _run(args: argparse.Namespace) -> int:
    config = cfgmod.load(args.config, overrides_from(args))
    from ..grid.job_folders import refuse_task_path  # a task's job folders belong to its jobs, never to a run

    refuse_task_path(config.output.file, "output file")
    refuse_task_path(args.timing_json, "--timing-json")
    result = Process(config).run(timing_json=args.timing_json, progress=False if args.no_progress else None)
    if not args.quiet:
        print(result.timing.table())
    if result.output:
        print(f"processed {result.events} events, wrote {result.written} to {result.output}", file=sys.stderr)
    else:
        print(f"processed {result.events} events ({result.written} passed the filters; no output file)",
              file=sys.stderr)
    return 0
