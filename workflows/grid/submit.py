"""Creating a task and handing its jobs to an executor (``submit``), and retrying failed ones (``resubmit``).

The configuration is validated (modules, parameters, DAG) before anything is written, so a typo
fails once, here, not in a thousand jobs. Submitting into an existing task directory continues
that task — it submits the jobs never submitted and leaves every other job alone — and only if
the configuration, inputs, splitting and inference settings are the same.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...framework import config as cfgmod
from ...framework.process import Process
from .batch_text import plain
from .errors import GridError, PartialSubmission
from .executors import executor_class
from .executors.base import parse_options
from .inputs import count_entries, resolve_inputs
from .lifecycle import can_move
from .records import Submission, read_json, write_json
from .splitting import JobSpec, by_events, by_files, generated
from .status import JobStatus, collect
from .task import Task, TaskDescription


@dataclass
class SubmitRequest:
    """What ``sonic submit`` was asked (see its ``--help``)."""

    config: str
    output_dir: str
    inputs: list[str] | None = None
    overrides: list[str] = field(default_factory=list)
    files_per_job: int | None = None
    events_per_job: int | None = None
    executor: str = "local"
    executor_options: dict[str, Any] = field(default_factory=dict)
    max_running: int | None = None
    max_retries: int = 3
    inference: str | None = None
    servers: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    """What a submission did: the task, the jobs submitted, and the jobs left as they were, with why."""

    task: Task
    submitted: list[int]
    skipped: dict[int, str] = field(default_factory=dict)


def _inference_overrides(request: SubmitRequest) -> list[str]:
    overrides = []
    if request.inference:
        overrides.append(f"services.inference.mode={request.inference}")
    if request.servers:
        overrides.append("services.inference.servers=[" + ", ".join(f"'{s}'" for s in request.servers) + "]")
    return overrides


def split(request: SubmitRequest, config: cfgmod.ProcessConfig) -> tuple[list[str], dict[str, int], list[JobSpec]]:
    """The task's inputs, splitting and jobs."""
    if request.files_per_job and request.events_per_job:
        raise GridError("give --files-per-job or --events-per-job, not both")
    for flag, value in (("--files-per-job", request.files_per_job), ("--events-per-job", request.events_per_job)):
        if value is not None and value < 1:
            raise GridError(f"{flag} must be at least 1, got {value}")
    source = config.source
    if source.type == "empty":
        per_job = request.events_per_job or max(1, source.events)
        return [], {"events_per_job": per_job}, generated(source.events, per_job, source.first_entry, source.max_events)
    files = resolve_inputs(request.inputs or source.files)
    if request.events_per_job:
        entries = count_entries(files, source.tree)
        jobs = by_events(files, entries, request.events_per_job, source.first_entry, source.max_events)
        return files, {"events_per_job": request.events_per_job}, jobs
    if source.first_entry or source.max_events >= 0:
        raise GridError("the configuration selects an entry range (source.first_entry/max_events): "
                        "split it with --events-per-job")
    per_job = request.files_per_job or 1
    return files, {"files_per_job": per_job}, by_files(files, per_job)


def prepare(request: SubmitRequest) -> Task:
    """The task directory for ``request``: created, or the existing one if it describes the same task."""
    plain(request.output_dir, "task directory")  # batch scripts carry it: refused before anything is read
    plain(os.getcwd(), "working directory")
    parse_options(executor_class(request.executor), request.executor_options)  # a typo fails before any file
    config_path = cfgmod.resolve_config_path(request.config)
    config = cfgmod.load(config_path, request.overrides)
    Process(cfgmod.load(config_path, request.overrides + _inference_overrides(request)), open_source=False)
    files, splitting, jobs = split(request, config)
    if not jobs:
        raise GridError("the inputs hold no entries to process: no job to submit")
    description = TaskDescription(
        name=config.name, config_source=os.path.abspath(config_path), overrides=list(request.overrides),
        workdir=os.getcwd(), inputs=files, splitting=splitting, njobs=len(jobs), executor=request.executor,
        executor_options=dict(request.executor_options), max_running=request.max_running,
        max_retries=request.max_retries, inference=request.inference, servers=list(request.servers))
    directory = Path(request.output_dir)
    if (directory / "task.json").exists():
        task = Task(directory)
        if task.description.fingerprint != description.compute_fingerprint(config.raw):
            raise GridError(f"{directory} holds a task with a different configuration, inputs, splitting or "
                            f"inference settings; submit into a new --output-dir (finished outputs are never "
                            f"overwritten)")
        return task
    if directory.exists() and any(directory.iterdir()):
        raise GridError(f"{directory} exists and is not a task directory; choose an empty or new --output-dir")
    return Task.create(directory, description, config.raw, jobs)


def hand_over(task: Task, indices: list[int], executor: str, options: dict[str, Any],
              max_running: int | None) -> dict[int, str]:
    """Records a new attempt of each job, then submits them; on refusal the records are restored."""
    runner = executor_class(executor)(task, options)  # checks the options before anything changes
    previous = {i: task.submission(i) for i in indices}
    old_reports = {i: read_json(task.files(i).report) for i in indices}
    for index in indices:
        old = previous[index]
        history = list(old.history) if old else []
        if old is not None:
            report = old_reports[index] or {}
            history.append({"attempt": old.attempt, "executor": old.executor, "batch_id": old.batch_id,
                            "submitted": old.submitted, **{k: v for k, v in report.items() if k != "attempt"}})
            task.files(index).report.unlink(missing_ok=True)
            for leftover in task.files(index).directory.glob("output.root.*"):
                leftover.unlink()  # partial (.tmp-*) or rejected output of the failed attempt
        Submission(attempt=(old.attempt + 1) if old else 1, executor=executor, options=dict(options),
                   history=history).save(task.files(index).submission)
    try:
        batch_ids = runner.submit(indices, max_running)
    except BaseException as err:
        done = err.batch_ids if isinstance(err, PartialSubmission) else {}
        _record_batch_ids(task, done)
        for index in indices:
            if index in done:
                continue
            old = previous[index]
            if old is None:
                task.files(index).submission.unlink(missing_ok=True)
                continue
            old.save(task.files(index).submission)
            if old_reports[index] is not None:
                write_json(task.files(index).report, old_reports[index])
        raise
    _record_batch_ids(task, batch_ids)
    return batch_ids


def _record_batch_ids(task: Task, batch_ids: dict[int, str]) -> None:
    for index, batch_id in batch_ids.items():
        sub = task.submission(index)
        sub.batch_id = batch_id
        sub.submitted = time.time()
        sub.save(task.files(index).submission)


def submit(request: SubmitRequest) -> Outcome:
    """Creates (or continues) the task and submits every job that was never submitted."""
    task = prepare(request)
    statuses, _ = collect(task, log_lines=0)
    fresh = [s.index for s in statuses if s.state == "new"]
    skipped = {s.index: s.state + (" (use `sonic resubmit`)" if s.state == "failed" else "")
               for s in statuses if s.state != "new"}
    if fresh:
        hand_over(task, fresh, request.executor, request.executor_options, request.max_running)
        task.update(executor=request.executor, executor_options=dict(request.executor_options),
                    max_running=request.max_running, max_retries=request.max_retries)
    return Outcome(task, fresh, skipped)


def resubmit(task: Task, jobs: list[int] | None = None, executor: str | None = None,
             options: dict[str, Any] | None = None, max_running: int | None = None,
             max_retries: int | None = None) -> Outcome:
    """Submits the failed jobs (or the failed ones among ``jobs``) again, while retries are left.

    Args:
        jobs: job indices to consider (default: all); a job that is not failed is refused.
        executor, options, max_running: change how jobs run (default: as the task was submitted).
        max_retries: retries allowed per job (default: the task's); attempts = 1 + retries.
    """
    description = task.description
    limit = description.max_retries if max_retries is None else max_retries
    statuses, _ = collect(task, log_lines=0)
    by_index: dict[int, JobStatus] = {s.index: s for s in statuses}
    chosen = task.indices if jobs is None else jobs
    retry, skipped = [], {}
    for index in chosen:
        if index not in by_index:
            raise GridError(f"task {task.directory} has jobs 0-{task.njobs - 1}, not {index}")
        status = by_index[index]
        if status.state == "new" or not can_move(status.state, "pending"):
            if jobs is not None:
                raise GridError(f"job {index} is {status.state}; only failed jobs are resubmitted"
                                + (" (done outputs are never redone)" if status.state == "done" else ""))
            continue
        if status.attempt > limit:
            skipped[index] = f"failed {status.attempt} times (retry limit {limit}; raise it with --max-retries)"
            continue
        retry.append(index)
    name = executor or description.executor
    opts = description.executor_options if options is None and name == description.executor else (options or {})
    cap = max_running if max_running is not None else description.max_running
    if retry:
        hand_over(task, retry, name, opts, cap)
        task.update(executor=name, executor_options=dict(opts), max_running=cap, max_retries=limit)
    return Outcome(task, retry, skipped)


def describe(outcome: Outcome) -> str:
    """A line or two saying what was submitted."""
    task = outcome.task
    text = f"task {task.name}: {task.njobs} jobs in {task.directory}; submitted {len(outcome.submitted)}"
    if outcome.submitted:
        text += f" to {task.description.executor}"
        if task.description.max_running:
            text += f" (at most {task.description.max_running} running)"
    states: dict[str, int] = {}
    for reason in outcome.skipped.values():
        states[reason] = states.get(reason, 0) + 1
    if states:
        text += "; left as they are: " + ", ".join(f"{n} {reason}" for reason, n in states.items())
    return text
