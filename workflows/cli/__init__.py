"""The ``sonic`` command line: one sub-module per sub-command, discovered at start-up.

Each module in this package defines ``register(subparsers)``, which adds its sub-command and sets
``func`` (called with the parsed arguments, returning an exit code). Whatever goes wrong ends in one
line on stderr and an exit code of :class:`~sonic_hep.framework.errors.ExitCode`, never a traceback
(``-v``, before or after the sub-command, shows debug logging and tracebacks; ``--version`` the version):

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
import re
import signal
import sys
import traceback
import typing

from ...framework.errors import ExitCode, SonicError
from ...framework.process import Interrupted, software_version


#: a check run on the parsed arguments of one (sub-)parser, which may complete them or call ``parser.error``
AfterParse = typing.Callable[["Parser", argparse.Namespace], None]


class _ShowsRequired(argparse.HelpFormatter):
    """Shows a positional that argparse must treat as optional (``nargs="?"``) but that a check after parsing
    requires (``shown_required``) without brackets: ``sonic run ... config``, not ``[config]``."""

    def _format_args(self, action: argparse.Action, default_metavar: str) -> str:
        if getattr(action, "shown_required", False):
            return self._metavar_formatter(action, default_metavar)(1)[0]
        return super()._format_args(action, default_metavar)


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (``sonic run: error: argument -n: ...``) instead of usage + error, and
    checks that run once this parser's arguments are parsed (:attr:`after_parse`), so a sub-command can fix
    up what argparse alone cannot express (``sonic run -i f.root miniaod``) and still fail as a usage error."""

    def __init__(self, *args: typing.Any, **kwargs: typing.Any):
        if kwargs.get("description"):  # the sub-commands' docstrings: a user reads the help, not reST
            kwargs["description"] = plain(kwargs["description"])
        super().__init__(*args, **kwargs)
        self.formatter_class = type(self.formatter_class.__name__, (_ShowsRequired, self.formatter_class), {})
        self.after_parse: list[AfterParse] = []

    def parse_known_args(self, args: typing.Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        namespace, extra = super().parse_known_args(args, namespace)
        for check in self.after_parse:
            check(self, namespace)
        return namespace, extra

    def error(self, message: str) -> typing.NoReturn:
        self.exit(ExitCode.USAGE, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="sonic", description="HEP event processing with coprocessors as a service")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging and full tracebacks")
    parser.add_argument("--version", action="version", version=f"sonic-hep {software_version()}",
                        help="print the version of sonic-hep and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
    _verbose_anywhere(parser)
    return parser


def _verbose_anywhere(parser: argparse.ArgumentParser) -> None:
    """``-v`` after the sub-command too (``sonic run cfg.yaml -v``), as after ``sonic``. SUPPRESS as default,
    so a sub-command without ``-v`` keeps what was given before it. A sub-command whose arguments are parsed
    by its own module (``sonic bench NAME``, ``_lazy``) takes ``-v`` there."""
    for action in parser._actions:  # noqa: SLF001 - argparse offers no public walk over sub-parsers
        if not isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            continue
        for child in action.choices.values():
            if child.add_help and not any("-v" in a.option_strings for a in child._actions):  # noqa: SLF001
                child.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                                   help="debug logging and full tracebacks (as sonic -v)")
            _verbose_anywhere(child)


def one_line(text: str) -> str:
    """A message on one line (causes from other libraries sometimes span several)."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`<]*?)\s*(?:<[^`>]*>)?`")  # :class:`~a.B`, :mod:`text <target>`
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)  # a literal may wrap in the docstring
_EMPHASIS = re.compile(r"(?<![\w*])\*{1,2}(?=\S)([^*]+?)(?<=\S)\*{1,2}(?![\w*])")


def plain(text: str) -> str:
    """Docstring text as a terminal shows it: reST markup (``literal``, :role:`target`, *emphasis*) removed,
    the words kept (``:class:`~a.b.C``` → ``C``; a role's explicit title wins over its target)."""
    def role(match: re.Match[str]) -> str:
        title = match.group(1)
        return title.rsplit(".", 1)[-1] if "`~" in match.group(0) else title.lstrip(".")

    text = _ROLE.sub(role, text)
    text = _LITERAL.sub(r"\1", text)
    return _EMPHASIS.sub(r"\1", text)


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
            traceback.print_exc()  # -v shows where; the exit status still says what kind of failure it was
            return int(getattr(err, "exit_code", ExitCode.ERROR))
        notes = "; ".join(getattr(err, "__notes__", []))
        _say(f"error: {err}" + (f" ({notes})" if notes else ""))
        return int(getattr(err, "exit_code", ExitCode.ERROR))
    except OSError as err:  # the system refused: a full disk, a permission, a file that vanished
        if args.verbose:
            traceback.print_exc()
            return ExitCode.ERROR
        what = f": {err.filename!r}" if err.filename else ""
        _say(f"error: {err.strerror or err}{what}")
        return ExitCode.ERROR
    except Exception as err:  # noqa: BLE001 - a bug: one line here, the traceback with -v
        if args.verbose:
            traceback.print_exc()
            return ExitCode.INTERNAL
        _say(f"internal error at {_where(err)}: {type(err).__name__}: {err} (a bug in sonic-hep; "
             f"run with -v for the traceback)")
        return ExitCode.INTERNAL


if __name__ == "__main__":
    sys.exit(main())
