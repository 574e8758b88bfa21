"""The ``sonic`` command line: one sub-module per sub-command, discovered at start-up.

Each module in this package defines ``register(subparsers)``, which adds its sub-command and sets
``func`` (called with the parsed arguments, returning an exit code). Whatever goes wrong ends in one
line on stderr and an exit code of :class:`~sonic_hep.framework.errors.ExitCode`, never a traceback
(``-v`` shows debug logging and tracebacks):

* a user error (:class:`~sonic_hep.framework.errors.SonicError`, or an ``OSError`` such as a full
  disk or a permission refused) names the culprit; exit 1 (or the error's own ``exit_code``);
* SIGINT/SIGTERM: "interrupted", exit 130/143;
* stdout closed early (``sonic describe | head``): silent, exit 141;
* anything else is a bug: one line saying where it happened, exit 70.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import signal
import sys
import traceback
import typing

from ...framework.errors import ExitCode, SonicError
from ...framework.process import Interrupted


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (``sonic run: error: argument -n: ...``) instead of usage + error."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(ExitCode.USAGE, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="sonic", description="HEP event processing with coprocessors as a service")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging and full tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def one_line(text: str) -> str:
    """A message on one line (causes from other libraries sometimes span several)."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _say(message: str) -> None:
    print(f"sonic: {one_line(message)}", file=sys.stderr)


def _silence_stdout() -> None:
    """Points stdout at /dev/null, so the interpreter's final flush into a closed pipe stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


_PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _where(err: BaseException) -> str:
    """``file:line`` of the innermost frame in sonic-hep's own code (else the innermost), for the one line a bug gets."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return "?"
    ours = [f for f in frames if f.filename.startswith(_PROJECT + os.sep)]
    frame = (ours or frames)[-1]
    name = os.path.relpath(frame.filename, _PROJECT) if ours else os.path.basename(frame.filename)
    return f"{name}:{frame.lineno}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # options of lazily imported sub-commands (``sonic bench NAME ...``) are parsed by their module
        if not hasattr(args, "arguments"):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.arguments = extra + list(args.arguments)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("urllib3", "matplotlib", "asyncio", "fsspec", "distributed", "tornado", "bokeh"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except Interrupted as err:
        _say(str(err))
        return err.exit_code
    except KeyboardInterrupt as err:  # stopped before or after the job itself (loading, starting)
        signum = getattr(err, "signum", signal.SIGINT)
        _say("interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}")
        return 128 + signum
    except BrokenPipeError:
        _silence_stdout()
        return ExitCode.BROKEN_PIPE
    except SonicError as err:
        if args.verbose:
            raise
        notes = "; ".join(getattr(err, "__notes__", []))
        _say(f"error: {err}" + (f" ({notes})" if notes else ""))
        return int(getattr(err, "exit_code", ExitCode.ERROR))
    except OSError as err:  # the system refused: a full disk, a permission, a file that vanished
        if args.verbose:
            raise
        what = f": {err.filename!r}" if err.filename else ""
        _say(f"error: {err.strerror or err}{what}")
        return ExitCode.ERROR
    except Exception as err:  # noqa: BLE001 - a bug: one line here, the traceback with -v
        if args.verbose:
            raise
        _say(f"internal error at {_where(err)}: {type(err).__name__}: {err} (a bug in sonic-hep; "
             f"run with -v for the traceback)")
        return ExitCode.INTERNAL


if __name__ == "__main__":
    sys.exit(main())
