"""The task directory: a self-describing record of a split workflow, its jobs and their outcomes.

::

    DIR/
      task.json              what was asked: configuration, inputs, splitting, inference, executor
      config.yaml            the configuration as it was at submission (overrides applied)
      jobs/0007/
        job.json             this job's inputs and entry range, and its exact ``sonic run`` arguments
        command.sh           the job wrapper for this job, runnable by hand (and the ``sonic run`` it runs)
        submit.json          attempt, executor, batch id, earlier attempts  (records.Submission)
        state.json           running / done / failed, reported by the job  (records.JobReport)
        job.log              the job's output, one header per attempt
        timing.json          the job's timing report
        output.root          the job's output (written under a temporary name, renamed when complete)
      logs/                  batch-system logs and submit scripts

Everything a job needs is in this directory and the configuration's own files (models), so a job
runs the same on this machine, a Slurm node or an HTCondor slot. Paths are absolute.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ...framework.process import software_version
from .batch_text import plain
from .errors import GridError, UnwritableRecord
from .records import JobReport, Submission, read_json, write_json
from .splitting import JobSpec

FORMAT = 1


@dataclass
class TaskDescription:
    """``task.json``: everything that defines the task's jobs, plus how they are run.

    The *fingerprint* covers what changes the jobs' results (configuration, inputs, splitting,
    inference mode and servers); submitting again into the same directory is allowed only with the
    same fingerprint, so finished outputs are never mixed with a different task's.
    """

    name: str
    config_source: str
    overrides: list[str]
    workdir: str
    inputs: list[str]
    splitting: dict[str, int]
    njobs: int
    executor: str = "local"
    executor_options: dict[str, Any] = field(default_factory=dict)
    max_running: int | None = None
    max_retries: int = 3
    inference: str | None = None
    servers: list[str] = field(default_factory=list)
    python: str = field(default_factory=lambda: sys.executable)
    software: str = field(default_factory=software_version)
    created: float = field(default_factory=time.time)
    fingerprint: str = ""
    format: int = FORMAT

    def compute_fingerprint(self, config_raw: dict[str, Any]) -> str:
        what = {"config": config_raw, "inputs": self.inputs, "splitting": self.splitting,
                "inference": self.inference, "servers": self.servers}
        return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class JobFiles:
    """Paths of one job's files (see the module docstring)."""

    directory: Path

    spec = property(lambda self: self.directory / "job.json")
    command = property(lambda self: self.directory / "command.sh")
    submission = property(lambda self: self.directory / "submit.json")
    report = property(lambda self: self.directory / "state.json")
    log = property(lambda self: self.directory / "job.log")
    timing = property(lambda self: self.directory / "timing.json")
    output = property(lambda self: self.directory / "output.root")


class Task:
    """An existing task directory.

    Args:
        directory: the task directory (``--output-dir`` of ``sonic submit``).

    Raises:
        GridError: when ``directory`` holds no task.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory).resolve()
        data = read_json(self.directory / "task.json")
        if data is None:
            raise GridError(f"{str(directory)!r} is not a task directory (no task.json); "
                            f"create one with `sonic submit CONFIG --output-dir {directory}`")
        if data.get("format") != FORMAT:
            raise GridError(f"{directory}/task.json has format {data.get('format')}, this sonic-hep reads {FORMAT}")
        self.description = TaskDescription(**data)

    # -- creation ------------------------------------------------------------------------------------
    @classmethod
    def create(cls, directory: str | os.PathLike, description: TaskDescription, config_raw: dict[str, Any],
               jobs: list[JobSpec]) -> Task:
        """Writes a new task directory (configuration, per-job descriptions and commands)."""
        plain(str(directory), "task directory")  # it is written into batch scripts
        root = Path(directory).resolve()
        plain(description.workdir, "working directory")
        if (root / "task.json").exists():
            raise GridError(f"{root} already holds a task")
        (root / "jobs").mkdir(parents=True, exist_ok=True)
        (root / "logs").mkdir(exist_ok=True)
        _write_text(root / "config.yaml", yaml.safe_dump(config_raw, sort_keys=False))
        description.njobs = len(jobs)
        description.fingerprint = description.compute_fingerprint(config_raw)
        task_json = asdict(description)
        for spec in jobs:
            files = JobFiles(root / "jobs" / f"{spec.index:04d}")
            files.directory.mkdir(exist_ok=True)
            args = job_arguments(description, root / "config.yaml", spec, files)
            write_json(files.spec, {**asdict(spec), "sonic_args": args})
            _write_text(files.command, command_script(description, args, spec, root))
            files.command.chmod(0o755)
        write_json(root / "task.json", task_json)  # last: a directory with task.json is complete
        return cls(root)

    # -- access --------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.description.name

    @property
    def njobs(self) -> int:
        return self.description.njobs

    @property
    def indices(self) -> list[int]:
        return list(range(self.njobs))

    def files(self, index: int) -> JobFiles:
        if not 0 <= index < self.njobs:
            raise GridError(f"task {self.directory} has jobs 0-{self.njobs - 1}, not {index}")
        return JobFiles(self.directory / "jobs" / f"{index:04d}")

    def spec(self, index: int) -> tuple[JobSpec, list[str]]:
        """The job's spec and its ``sonic`` arguments."""
        data = read_json(self.files(index).spec)
        args = data.pop("sonic_args")
        data["inputs"] = tuple(data["inputs"])
        return JobSpec(**data), args

    def submission(self, index: int) -> Submission | None:
        return Submission.load(self.files(index).submission)

    def report(self, index: int) -> JobReport | None:
        """The job's own report for its *current* attempt (a leftover of an older attempt is ignored)."""
        report = JobReport.load(self.files(index).report)
        submission = self.submission(index)
        if report is None or submission is None or report.attempt != submission.attempt:
            return None
        return report

    def update(self, **changes: Any) -> None:
        """Changes how the task runs (executor, options, caps); never what its jobs compute."""
        for key in changes:
            if key not in ("executor", "executor_options", "max_running", "max_retries", "servers"):
                raise ValueError(f"{key} cannot change after the task was created")
        for key, value in changes.items():
            setattr(self.description, key, value)
        write_json(self.directory / "task.json", asdict(self.description))

    def log_tail(self, index: int, lines: int = 10) -> list[str]:
        """The last lines of the job's log (of its batch-system log when the job never started)."""
        candidates = [self.files(index).log]
        submission = self.submission(index)
        if submission and submission.batch_id:
            logs = self.directory / "logs"  # slurm-<array>_<task>.out, condor-<cluster>.<proc>.out/.err
            candidates += sorted(logs.glob(f"*-{submission.batch_id}.out")) + \
                sorted(logs.glob(f"*-{submission.batch_id}.err"))
        for path in candidates:
            try:
                with open(path, "rb") as stream:
                    stream.seek(0, os.SEEK_END)
                    stream.seek(max(0, stream.tell() - 16384))
                    text = stream.read().decode(errors="replace")
            except FileNotFoundError:
                continue
            tail = [line for line in text.splitlines() if line.strip()]
            if tail:
                return tail[-lines:]
        return []


def _write_text(path: Path, text: str) -> None:
    """Writes a task file; a full disk or a read-only folder is one error naming the file."""
    try:
        path.write_text(text)
    except OSError as err:
        raise UnwritableRecord(path, err.strerror or str(err)) from None


def job_arguments(description: TaskDescription, config: Path, spec: JobSpec, files: JobFiles) -> list[str]:
    """The ``sonic`` command-line arguments of one job (after the program name)."""
    args = ["run", str(config)]
    if spec.inputs:
        args += ["--input", *spec.inputs]
    args += ["--output", str(files.output), "--first-entry", str(spec.first_entry)]
    if spec.max_events >= 0:  # otherwise: to the end of its inputs
        args += ["--max-events", str(spec.max_events)]
    if description.inference:
        args += ["--inference", description.inference]
    for server in description.servers:
        args += ["--server", server]
    args += ["--timing-json", str(files.timing), "--no-progress", "-q"]
    return args


def command_script(description: TaskDescription, args: list[str], spec: JobSpec, directory: Path) -> str:
    """A shell script that runs the job by hand: the job wrapper, which runs ``sonic ARGS`` (shown in a
    comment) and records the job's state — ``sonic run`` alone may not write into a job folder."""
    what = (f"{len(spec.inputs)} file(s)" if spec.inputs else "generated events") + \
        (f", entries {spec.first_entry}..{spec.first_entry + spec.max_events - 1}" if spec.max_events >= 0 else "")
    runs = shlex.join(["sonic", *args]).replace("\n", " ")
    return (f"#!/bin/sh\n# job {spec.index} of task {description.name!r}: {what}\n# runs: {runs}\n"
            f"cd {shlex.quote(description.workdir)} || exit 1\n"
            f"exec {shlex.join([description.python, '-m', 'sonic_hep.workflows.grid.job', str(directory), str(spec.index)])}\n")
