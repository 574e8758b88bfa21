"""Exceptions a user can cause, each naming the thing to fix.

Every error raised for bad input derives from :class:`SonicError`, so the CLI can print the message
without a traceback and exit non-zero. Context ("while running module X on event N") is added with
``add_note`` where the error passes through a layer, the way awkward does, rather than rewriting the
message.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Iterable
from typing import Literal


class ExitCode(enum.IntEnum):
    """The exit status of every ``sonic`` command (documented in the README; scripts rely on it)."""

    OK = 0
    #: a user error (configuration, input, output, inference, grid): one line on stderr naming the culprit;
    #: also ``sonic compare``'s "the outputs differ" and ``sonic status``'s "a job failed"
    ERROR = 1
    #: a bad command line (argparse), or ``sonic compare`` could not read its files (like diff's "trouble")
    USAGE = 2
    #: an unexpected exception: a bug in sonic-hep (``-v`` shows the traceback)
    INTERNAL = 70
    #: stdout was closed early (``sonic ... | head``), as a tool killed by SIGPIPE
    BROKEN_PIPE = 141
    #: stopped by SIGINT (130), SIGTERM (143) or SIGHUP (129): 128 + the signal number; nothing is left that
    #: looks complete and every server the job started is stopped
    HANGUP = 129
    INTERRUPTED = 130
    TERMINATED = 143


class SonicError(Exception):
    """Base class of user-facing errors: the message is meant to be read, not debugged.

    ``exit_code`` is what the command line returns for it (:class:`ExitCode`).
    """

    exit_code: int = ExitCode.ERROR


class ConfigError(SonicError):
    """A process description (YAML or command-line override) that cannot be used.

    Args:
        message (str): what is wrong.
        file (str | None): the YAML file, when the problem comes from one.
        key (str | None): dotted path of the key, e.g. ``modules.pnetAK4.batch_size``.
        line (int | None): 1-based line in ``file``.
    """

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None, line: int | None = None):
        self.file, self.key, self.line, self.reason = file, key, line, message
        where = ""
        if file:
            where = f"{file}:{line}: " if line else f"{file}: "
        if key:
            where += f"{key}: "
        super().__init__(where + message)


class ParamError(SonicError):
    """A module parameter that cannot be used, raised by ``Module.validate_params``.

    The process turns it into a :class:`ConfigError` naming the file, the module and the key, so the
    fields are typed rather than read back from positional ``args``.

    Args:
        name: the parameter.
        problem: ``"unknown"`` (the module type declares no such parameter), ``"missing"`` (a required
            one not given) or ``"value"`` (the value cannot be used).
        reason: what is wrong, in words.
        known: the parameters the module type declares (for ``"unknown"``).
    """

    def __init__(self, name: str, problem: Literal["unknown", "missing", "value"], reason: str,
                 known: list[str] | None = None):
        self.name, self.problem, self.reason, self.known = name, problem, reason, known or []
        super().__init__(f"{name}: {reason}")


class GraphError(SonicError):
    """The modules do not form a valid DAG: a cycle, or a product nobody makes."""


class SourceError(SonicError):
    """An input file, tree or branch that cannot be read."""


class OutputError(SonicError):
    """A product that cannot be written, or an output path that cannot be used."""


class ModuleError(SonicError):
    """A module raised while processing an event; names the module label and the event.

    The message gives the module's context once; the cause's own notes (e.g. the inference client's
    "after 3 attempts ... no other server to fail over to") are carried over, since the command line
    prints the notes of the error it catches, not of its cause.
    """

    def __init__(self, label: str, event: str, phase: str, cause: BaseException):
        self.label, self.event, self.phase, self.cause = label, event, phase, cause
        super().__init__(f"module '{label}' failed in {phase} on {event}: {type(cause).__name__}: {cause}")
        for note in getattr(cause, "__notes__", ()):
            self.add_note(note)


class InferenceError(SonicError):
    """An inference request that failed: names the model and, for SONIC, the server."""


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """Returns ' (did you mean X?)' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.5)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"
