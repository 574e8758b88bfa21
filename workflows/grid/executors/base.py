"""The executor interface: hand jobs to a batch system, and ask it about them. Two calls, nothing else.

An executor never decides a job's state (``lifecycle`` does, from the job's own report and the
batch system's view) and never writes a job's report. Executors register by ``name``; their
options are a dataclass declared on the class, so ``-E key=value`` is checked before anything is
submitted, like module parameters::

    class MyExecutor(Executor):
        name = "mine"

        @dataclass
        class Options:
            queue: str = field(default="short", metadata={"doc": "queue to submit to"})

        def submit(self, indices, max_running): ...
        def poll(self, batch_ids): ...
"""

from __future__ import annotations

import abc
import dataclasses
import shlex
import subprocess
from dataclasses import dataclass
from typing import Any, ClassVar

from ....framework.yaml_reader import parse_value
from ....framework.errors import ConfigError, did_you_mean
from ....framework.settings import Problem, build
from ..errors import GridError, SubmitError
from ..lifecycle import BatchStatus
from ..task import Task

_REGISTRY: dict[str, type[Executor]] = {}


@dataclass
class NoOptions:
    """This executor takes no options."""


class Executor(abc.ABC):
    """Runs a task's jobs somewhere.

    Args:
        task: the task whose jobs it runs.
        options: executor options (``-E key=value``), checked against ``Options``.
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if cls.name:
            _REGISTRY[cls.name] = cls

    def __init__(self, task: Task, options: dict[str, Any] | None = None):
        self.task = task
        self.options = parse_options(self, options or {})

    @abc.abstractmethod
    def submit(self, indices: list[int], max_running: int | None) -> dict[int, str]:
        """Hands jobs ``indices`` to the batch system, at most ``max_running`` running at once.

        Returns:
            each job's batch id (what ``poll`` gets back).

        Raises:
            SubmitError: the batch system refused or cannot be reached (nothing was submitted).
        """

    @abc.abstractmethod
    def poll(self, batch_ids: dict[int, str]) -> dict[int, BatchStatus]:
        """What the batch system says of each job: pending, running, ended (with its words), or unknown."""

    def job_command(self, index: int | str, *extra: str) -> list[str]:
        """The command that runs job ``index`` (a string such as ``$SLURM_ARRAY_TASK_ID`` is allowed)."""
        return [self.task.description.python, "-m", "sonic_hep.workflows.grid.job", str(self.task.directory),
                str(index), *extra]


def executor_class(name: str) -> type[Executor]:
    """The executor called ``name``."""
    from . import condor, dask, local, slurm  # noqa: F401 - importing registers them

    if name not in _REGISTRY:
        raise GridError(f"unknown executor {name!r}{did_you_mean(name, _REGISTRY)}; known: {names()}")
    return _REGISTRY[name]


def names() -> list[str]:
    from . import condor, dask, local, slurm  # noqa: F401

    return sorted(_REGISTRY)


def parse_options(executor: Executor | type[Executor], raw: dict[str, Any]) -> Any:
    """``raw`` (strings from ``-E key=value``, or values from task.json) → the executor's Options.

    ``cpus-per-task`` is accepted for ``cpus_per_task``; a string where another type is declared is read
    as YAML (``-E extra=[a, b]``), since everything on the command line is a string.
    """
    def error(problem: Problem) -> GridError:
        if problem.kind == "unknown":
            return GridError(f"executor {executor.name!r} has no option {problem.key!r}{problem.suggestion}; "
                             f"its options: {', '.join(problem.known) or 'none'}")
        return GridError(f"executor {executor.name!r} option {problem.key!r}: {problem.message}")

    def prepare(key: str, value: Any, tp: Any) -> Any:
        if not isinstance(value, str) or tp is str:
            return value
        try:
            return parse_value(value)
        except ConfigError as err:
            raise GridError(f"executor {executor.name!r} option {key!r}: {err.reason}") from None

    return build(executor.Options, raw, error=error, normalize_key=lambda key: str(key).replace("-", "_"),
                 prepare=prepare)


def option_help(cls: type[Executor]) -> str:
    """One line per option: name, type, default, doc (for ``sonic submit --help``)."""
    lines = []
    for f in dataclasses.fields(cls.Options):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        lines.append(f"    {f.name}={default!r}: {f.metadata.get('doc', '')}")
    return "\n".join(lines) or "    (no options)"


def parse_key_values(items: list[str]) -> dict[str, str]:
    """``["partition=debug", "time=1:00:00"]`` → a dict (a value may contain ``=``)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise GridError(f"executor option {item!r} must look like key=value")
        out[key.strip()] = value.strip()
    return out


def run_command(cmd: list[str], what: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs a batch-system command; a missing program or a failure is a SubmitError naming the command."""
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise SubmitError(f"{what}: {cmd[0]!r} is not installed or not on PATH") from None
    except subprocess.TimeoutExpired:
        raise SubmitError(f"{what}: `{shlex.join(cmd)}` did not answer within {timeout:.0f} s") from None
    return result
