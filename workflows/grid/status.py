"""``sonic status``: every job's state (from its report and the batch system), and a timing summary.

``collect`` asks each executor about the jobs it holds that have not reported an end, and combines
the answers with the jobs' reports through :mod:`lifecycle`. A done job whose output changed after
it was marked done (removed, rewritten, corrupted: :mod:`integrity`) is shown as failed with what
changed, so ``resubmit`` redoes it. Everything else here formats.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import GridError
from .executors import executor_class
from .integrity import what_changed
from .lifecycle import STATES, UNKNOWN, BatchStatus, State, resolve
from .records import JobReport, Submission, why_unwritable
from .task import Task

log = logging.getLogger(__name__)

#: a submission without a batch id this old was interrupted (sbatch answers in well under a minute)
LOST_SUBMISSION_S = 300.0


@dataclass
class JobStatus:
    """One job as ``status`` shows it."""

    index: int
    state: State
    reason: str = ""
    submission: Submission | None = None
    report: JobReport | None = None
    log_tail: list[str] = field(default_factory=list)

    @property
    def attempt(self) -> int:
        return self.submission.attempt if self.submission else 0

    def as_dict(self) -> dict[str, Any]:
        report = self.report
        return {"index": self.index, "state": self.state, "reason": self.reason, "attempt": self.attempt,
                "executor": self.submission.executor if self.submission else None,
                "batch_id": self.submission.batch_id if self.submission else None,
                "host": report.host if report else None, "exit_code": report.exit_code if report else None,
                "events": report.events if report else None, "written": report.written if report else None,
                "bad_inputs": report.bad_inputs if report else [], "timing": report.timing if report else {},
                "started": report.started if report else None, "ended": report.ended if report else None,
                "log_tail": self.log_tail}


def poll_batch(task: Task, submissions: dict[int, Submission]) -> tuple[dict[int, BatchStatus], list[str]]:
    """Asks each executor about its jobs; an executor that cannot answer gives UNKNOWN and a warning."""
    out: dict[int, BatchStatus] = {}
    groups: dict[tuple[str, str], dict[int, str]] = {}
    options: dict[tuple[str, str], dict[str, Any]] = {}
    for index, sub in submissions.items():
        if not sub.batch_id:  # the submitting process died before the batch system answered
            if time.time() - sub.submitted > LOST_SUBMISSION_S:
                out[index] = BatchStatus("ended", "its submission never got a batch id")
            continue
        key = (sub.executor, repr(sorted(sub.options.items())))
        groups.setdefault(key, {})[index] = sub.batch_id
        options[key] = sub.options
    warnings = []
    for key, batch_ids in groups.items():
        try:
            out.update(executor_class(key[0])(task, options[key]).poll(batch_ids))
        except GridError as err:
            warnings.append(f"cannot ask {key[0]} about {len(batch_ids)} jobs: {err}")
    return out, warnings


def collect(task: Task, log_lines: int = 8, verify: bool = False) -> tuple[list[JobStatus], list[str]]:
    """The state of every job, and warnings about batch systems that could not be asked.

    Args:
        log_lines: log lines kept per failed job.
        verify: recompute every done output's sha256 (otherwise only a changed size or time is looked into).
    """
    submissions = {i: task.submission(i) for i in task.indices}
    reports = {i: task.report(i) for i in task.indices}
    changed = {i: what_changed(task.files(i).output, lambda i=i: task.spec(i)[0], r, full=verify)
               for i, r in reports.items() if r is not None and r.state == "done"}
    open_jobs = {i: s for i, s in submissions.items()
                 if s is not None and (reports[i] is None or reports[i].state == "running")}
    batch, warnings = poll_batch(task, open_jobs)
    statuses = []
    for index in task.indices:
        sub, report = submissions[index], reports[index]
        reported = report.state if report else "none"
        reason = report.reason if report else ""
        if changed.get(index):  # the done output is no longer what the job wrote: it must be redone
            reported, reason = "failed", f"output changed since done: {changed[index]}"
        state, reason = resolve(sub is not None, reported, batch.get(index, UNKNOWN), reason)
        if state == "failed" and reported in ("none", "running"):  # it ended without a final report: why?
            unwritable = why_unwritable(task.files(index).directory)
            reason = f"could not write its report: {unwritable}" if unwritable else reason
        tail = task.log_tail(index, log_lines) if state == "failed" and log_lines else []
        statuses.append(JobStatus(index, state, reason, sub, report, tail))
    return statuses, warnings


def counts(statuses: list[JobStatus]) -> dict[str, int]:
    """Jobs per state, in lifecycle order."""
    return {state: sum(s.state == state for s in statuses) for state in STATES}


def timing_summary(statuses: list[JobStatus]) -> dict[str, Any]:
    """Per-job timing of the done jobs: events/s, CPU per event, wait on inference, throughput."""
    done = [s.report for s in statuses if s.state == "done" and s.report and s.report.timing]
    if not done:
        return {"jobs": 0}
    rates = [r.timing["events_per_s"] for r in done]
    events = sum(r.timing["events"] for r in done)
    cpu = sum(r.timing["cpu_s"] for r in done)
    waits = [r.timing["wait_ms_per_event"] for r in done]
    span = max(r.ended or 0 for r in done) - min(r.started or 0 for r in done)
    return {"jobs": len(done), "events": events, "cpu_s": cpu,
            "cpu_ms_per_event": 1000 * cpu / events if events else 0.0,
            "job_events_per_s_mean": statistics.fmean(rates), "job_events_per_s_min": min(rates),
            "job_events_per_s_max": max(rates), "wait_ms_per_event_mean": statistics.fmean(waits),
            "span_s": span, "task_events_per_s": events / span if span > 0 else 0.0,
            "output_bytes": sum(r.output_bytes or 0 for r in done)}


def table(task: Task, statuses: list[JobStatus], show_all: bool = True) -> str:
    """The per-job state table, failed jobs followed by their log's last lines, then the summary."""
    n = counts(statuses)
    head = f"task {task.name} in {task.directory}: {len(statuses)} jobs — " + \
        ", ".join(f"{v} {k}" for k, v in n.items() if v)
    lines = [head, f"{'job':>5} {'state':<8} {'try':>3} {'batch id':<18} {'host':<12} {'events':>8} "
                   f"{'ev/s':>8} {'wait ms/ev':>10}  reason"]
    for s in statuses:
        if not show_all and s.state == "done":
            continue
        r = s.report
        timing = r.timing if r and s.state == "done" else {}
        batch_id = (s.submission.batch_id or "-") if s.submission else "-"
        events = f"{r.events}" if r and r.events is not None else "-"
        rate = f"{timing['events_per_s']:.3g}" if timing else "-"
        wait = f"{timing['wait_ms_per_event']:.2f}" if timing else "-"
        lines.append(f"{s.index:>5} {s.state:<8} {s.attempt:>3} {batch_id[:18]:<18} {(r.host if r else '-')[:12]:<12} "
                     f"{events:>8} {rate:>8} {wait:>10}  {' '.join(s.reason.split())}")
        for bad in (r.bad_inputs if r and s.state == "failed" else []):
            lines.append(f"{'':>6}unreadable input: {bad}")
        lines += [f"{'':>6}| {line}" for line in s.log_tail]
    summary = timing_summary(statuses)
    if summary["jobs"]:
        s = summary
        lines += ["", f"done jobs: {s['jobs']}, {s['events']} events, {s['cpu_ms_per_event']:.2f} ms CPU/event; "
                      f"per job {s['job_events_per_s_mean']:.3g} events/s (min {s['job_events_per_s_min']:.3g}, "
                      f"max {s['job_events_per_s_max']:.3g}), wait on inference {s['wait_ms_per_event_mean']:.2f} "
                      f"ms/event; task {s['task_events_per_s']:.3g} events/s over {s['span_s']:.1f} s"]
    return "\n".join(lines)


def wait(task: Task, interval: float = 2.0, timeout: float | None = None,
         progress: Callable[[dict[str, int]], None] | None = None) -> list[JobStatus]:
    """Polls until no job is pending or running; returns the final statuses.

    Raises:
        GridError: when ``timeout`` seconds pass first.
    """
    start = time.monotonic()
    last: dict[str, int] | None = None
    while True:
        statuses, warnings = collect(task, log_lines=0)
        for warning in warnings:
            log.warning("%s", warning)
        now = counts(statuses)
        if progress and now != last:
            progress(now)
            last = now
        if now["pending"] == 0 and now["running"] == 0:
            return collect(task)[0]
        if timeout is not None and time.monotonic() - start > timeout:
            raise GridError(f"jobs of {task.directory} still pending or running after {timeout:.0f} s: {now}")
        time.sleep(interval)
