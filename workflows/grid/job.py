"""The job wrapper: what every executor runs on its worker — ``python -m sonic_hep.workflows.grid.job DIR INDEX``.

One process per job, the same on every executor:

1. writes ``state.json`` = running (host, pid, batch id) and sends its output to ``job.log``;
2. opens every input file, so an unreadable one is reported by name for this job;
3. runs the job's recorded ``sonic run`` arguments in this process (so killing the job kills all
   of it; the framework writes the output under a temporary name and renames it only at the end);
4. validates the result — the output opens, its tree holds as many entries as the job wrote, its
   metadata name this job's inputs and entry range, and the job processed exactly the events its
   entry range holds — and only then writes ``done``, with the output's sha256, size and time
   (``integrity``: ``merge`` refuses an output changed since, ``status`` reports it).

A failure writes ``failed`` with the reason; SIGTERM (``scancel``, ``condor_rm``, a wall-time
limit) is reported as such. A SIGKILL leaves ``running`` behind, which ``status`` turns into
``failed`` once the batch system says the job has ended. Exit status: 0 done, 1 failed,
2 unreadable input (retrying will not help), 3 output did not validate, 4 the job could not write its own
record or log (a full disk, a quota, a read-only task folder): it says so in one line on stderr naming the
file, and ``status`` names the folder's file system instead of blaming the batch system.

``--sandbox`` runs an HTCondor job without a shared filesystem: the task's files were transferred
into the working directory and the results are written there, for HTCondor to transfer back.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

from ...framework.errors import SonicError, SourceError
from ...framework.inference.serving import FLEET_FILE
from ...framework.source import open_tree
from .errors import GridError, UnwritableRecord
from .integrity import Seal, spec_mismatch
from .job_folders import job_writes
from .records import JobReport, Submission, read_json
from .splitting import JobSpec
from .task import JobFiles, Task, TaskDescription, job_arguments
from .validation import check_output, timing_summary

EXIT_DONE, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INVALID, EXIT_UNWRITABLE = 0, 1, 2, 3, 4

log = logging.getLogger(__name__)


class Terminated(KeyboardInterrupt):
    """SIGTERM from the batch system: unwinds like Ctrl-C, so the framework discards the partial output."""


def batch_id_from_environment() -> str | None:
    """The id the batch system gave this job, from its environment variables."""
    env = os.environ
    if "SONIC_GRID_BATCH_ID" in env:  # set by the local and dask drivers
        return env["SONIC_GRID_BATCH_ID"]
    if "SLURM_ARRAY_JOB_ID" in env:
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env.get('SLURM_ARRAY_TASK_ID', '')}"
    if "SLURM_JOB_ID" in env:
        return env["SLURM_JOB_ID"]
    if "_CONDOR_JOB_AD" in env:
        try:
            text = Path(env["_CONDOR_JOB_AD"]).read_text()
            ad = dict(line.split(" = ", 1) for line in text.splitlines() if " = " in line)
            return f"{ad['ClusterId']}.{ad['ProcId']}"
        except (OSError, KeyError):
            return None
    return None


def redirect_output(path: Path, header: str) -> None:
    """Sends this process's stdout/stderr (C libraries included) to the job log, after a header.

    Raises:
        UnwritableRecord: the log cannot be written (output stays where it was, so the error can be seen).
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as err:
        raise UnwritableRecord(path, err.strerror or str(err)) from None
    try:
        os.write(fd, f"\n===== {header} =====\n".encode())
    except OSError as err:
        os.close(fd)
        raise UnwritableRecord(path, err.strerror or str(err)) from None
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def check_inputs(spec: JobSpec, tree: str) -> tuple[list[int], dict[str, str]]:
    """Entries of each input file, and the error of each file that cannot be read."""
    entries, bad = [], {}
    for path in spec.inputs:
        try:
            entries.append(int(open_tree(path, tree).num_entries))
        except SourceError as err:
            bad[path] = " ".join(str(err).split())
    return entries, bad


def expected_events(spec: JobSpec, entries: list[int]) -> int:
    """Events the job must process: its entry range, clipped to what its files hold."""
    if spec.expected_events is not None:
        return spec.expected_events
    available = max(0, sum(entries) - spec.first_entry)
    return available if spec.max_events < 0 else min(available, spec.max_events)


def run_sonic(args: list[str]) -> None:
    """Runs ``sonic ARGS`` in this process; SonicError and other exceptions propagate.

    Only the ``run`` sub-command is registered: a job must not depend on every other sub-command importing.
    """
    from ..cli import run

    parser = argparse.ArgumentParser(prog="sonic")
    run.register(parser.add_subparsers(dest="command", required=True))
    parsed = parser.parse_args(args)
    code = parsed.func(parsed)
    if code:
        raise GridError(f"sonic {args[0]} exited with status {code}")


def run_job(files: JobFiles, description: TaskDescription, spec: JobSpec, args: list[str], tree: str,
            sandbox: bool = False) -> int:
    """Runs one job attempt and writes its report; returns the exit status.

    A record or log the job cannot write (its task folder filled up, a quota, a read-only folder) ends it
    with one line on stderr naming the file and :data:`EXIT_UNWRITABLE`: a traceback there would bury the
    cause, and whoever looks next (``status``, the driver, the batch system's log) must see that it was the
    disk, not the job or the batch system.
    """
    try:
        return _attempt(files, spec, args, tree, sandbox)
    except UnwritableRecord as err:
        _say(f"job {spec.index}: error: {err}")
        return EXIT_UNWRITABLE


def _say(line: str) -> None:
    """One line on stderr, if stderr can still be written (on a full disk the job log may not be)."""
    with contextlib.suppress(OSError, ValueError):
        print(f"sonic {line}", file=sys.stderr, flush=True)


def _flush() -> None:
    """Flushes stdout and stderr before ``os._exit``; a full disk under the job log loses the rest, quietly."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def _attempt(files: JobFiles, spec: JobSpec, args: list[str], tree: str, sandbox: bool) -> int:
    """The attempt itself (see :func:`run_job`); UnwritableRecord leaves it."""
    submission = Submission.load(files.submission)
    attempt = submission.attempt if submission else 1
    report = JobReport(attempt=attempt, state="running", batch_id=batch_id_from_environment(), started=time.time())
    redirect_output(files.log, f"attempt {attempt} of job {spec.index} on {report.host} pid {report.pid} "
                                f"batch id {report.batch_id} at {time.strftime('%Y-%m-%d %H:%M:%S')}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    report.save(files.report)
    with contextlib.suppress(OSError):
        print("command:", " ".join(["sonic", *args]), flush=True)

    def finish(state: str, code: int, reason: str = "", **extra: object) -> int:
        final = replace(report, state=state, ended=time.time(), exit_code=code, reason=reason, **extra)
        final.save(files.report)
        with contextlib.suppress(OSError):  # recorded; the log line is a courtesy
            print(f"job {spec.index}: {state}" + (f": {reason}" if reason else ""), flush=True)
        return code

    for stale in files.directory.glob(f"{files.output.name}.tmp-*"):
        stale.unlink()  # a killed earlier attempt's partial output
    entries, bad = check_inputs(spec, tree)
    if bad:
        return finish("failed", EXIT_BAD_INPUT, f"{len(bad)} unreadable input file(s): {', '.join(bad)}",
                      bad_inputs=list(bad.values()))
    expected = expected_events(spec, entries)

    terminated = False

    def on_sigterm(signum: int, frame: object) -> None:
        nonlocal terminated
        terminated = True
        raise Terminated()

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        with job_writes(files.output, files.timing):  # its own job folder: refused to anyone else
            run_sonic(args)
    except BaseException as err:  # noqa: BLE001 - every way a job can end is reported, then it exits
        signum = getattr(err, "signum", None)  # sonic run's own handler stops with Interrupted(signum)
        if terminated or signum == signal.SIGTERM:  # the framework turns the unwinding into Interrupted
            return finish("failed", 128 + signal.SIGTERM, "terminated by SIGTERM (batch system stop or time limit)")
        if isinstance(err, KeyboardInterrupt) or signum == signal.SIGINT:
            return finish("failed", 130, "interrupted (SIGINT)")
        if isinstance(err, SonicError):
            notes = "; ".join(getattr(err, "__notes__", []))
            return finish("failed", EXIT_FAILED, f"{type(err).__name__}: {err}" + (f" ({notes})" if notes else ""))
        if isinstance(err, SystemExit):  # argparse refused the recorded arguments (its message is in the log)
            return finish("failed", EXIT_FAILED, f"sonic {args[0]} refused its arguments (exit status {err.code})")
        if not isinstance(err, Exception):
            raise
        traceback.print_exc()  # a bug in a module: the traceback goes to the log
        return finish("failed", EXIT_FAILED, f"{type(err).__name__}: {err}")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    timing = read_json(files.timing) or {}
    try:
        check = check_output(files.output, tree)
        processed = int(timing.get("events", -1))
        if processed != expected:
            raise GridError(f"processed {processed} events, but its entry range holds {expected}")
        wrong = spec_mismatch(spec, check.metadata)
        if wrong:
            raise GridError(wrong)
        seal = Seal.of(files.output)
    except GridError as err:
        if files.output.exists():
            files.output.replace(files.output.with_name(files.output.name + ".rejected"))
        return finish("failed", EXIT_INVALID, f"output rejected: {err}")
    return finish("done", EXIT_DONE, events=processed, written=check.entries, output_bytes=seal.output_bytes,
                  sha256=seal.sha256, output_mtime_ns=seal.output_mtime_ns, sandbox=sandbox,
                  timing=timing_summary(timing))


def sandbox_job(index: int) -> tuple[JobFiles, TaskDescription, JobSpec, list[str], str]:
    """The job as HTCondor transferred it into the working directory (no shared filesystem)."""
    here = Path.cwd()
    description = TaskDescription(**read_json(here / "task.json"))
    data = read_json(here / "job.json")
    data.pop("sonic_args")
    spec = JobSpec(**{**data, "inputs": tuple(p if "://" in p or not (here / Path(p).name).exists()
                                               else str(here / Path(p).name) for p in data["inputs"])})
    files = JobFiles(here)
    args = job_arguments(description, here / "config.yaml", spec, files)
    return files, description, spec, args, _tree(here / "config.yaml")


def _tree(config_path: Path) -> str:
    import yaml

    raw = yaml.safe_load(config_path.read_text()) or {}
    return str((raw.get("source") or {}).get("tree", "Events"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sonic_hep.workflows.grid.job", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", help="the task directory (with --sandbox: ignored, the working directory)")
    parser.add_argument("index", type=int, help="the job's index")
    parser.add_argument("--offset", type=int, default=0, help="added to index (Slurm arrays above MaxArraySize)")
    parser.add_argument("--sandbox", action="store_true", help="HTCondor file transfer: work in the current directory")
    args = parser.parse_args(argv)
    index = args.index + args.offset
    if not args.sandbox and (Path(args.directory) / FLEET_FILE).is_file():  # a fleet's server job
        from .fleet_member import serve

        code = serve(args.directory, index)
        _flush()
        os._exit(code)
    if args.sandbox:
        files, description, spec, sonic_args, tree = sandbox_job(index)
    else:
        task = Task(args.directory)
        spec, sonic_args = task.spec(index)
        files, description, tree = task.files(index), task.description, _tree(task.directory / "config.yaml")
    code = run_job(files, description, spec, sonic_args, tree, sandbox=args.sandbox)
    if args.sandbox:  # HTCondor holds a job whose listed outputs are missing; state.json says it failed
        for path in (files.output, files.timing):
            with contextlib.suppress(OSError):  # a full sandbox: HTCondor holds the job, state.json says why
                path.touch(exist_ok=True)
    _flush()
    os._exit(code)  # do not wait for threads a failed module may have left behind


if __name__ == "__main__":
    sys.exit(main())
