"""Executors without a batch system of their own (a process pool, a Dask cluster) run a *driver*.

``submit`` starts ``python -m sonic_hep.workflows.grid.executors.driver DIR ...`` detached from the
terminal and returns, as ``sbatch`` does. The driver keeps at most ``max_running`` jobs in flight on
a ``concurrent.futures.Executor`` (threads that start job processes, or a Dask client's executor),
and when a job process dies without reporting (killed by a signal, out of memory) it writes the
job's ``failed`` report with the cause. ``poll`` asks whether the driver process still lives: while
it does, its jobs are pending or running; once it is gone, a job that never reported has failed.
"""

from __future__ import annotations

import abc
import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Executor as PoolExecutor, Future, wait
from pathlib import Path

import psutil

from ..lifecycle import UNKNOWN, BatchStatus
from ..records import JobReport, read_json, write_json
from ..task import Task
from .base import Executor


def driver_id(executor: str, pid: int, host: str) -> str:
    """The batch id of every job a driver runs: ``local:1234@host``."""
    return f"{executor}:{pid}@{host}"


def run_job_process(python: str, directory: str, index: int, workdir: str, batch_id: str) -> int:
    """Runs one job as its own process (own session, so a kill reaches it whole); returns its exit status."""
    log = Path(directory) / "jobs" / f"{index:04d}" / "job.log"
    with open(log, "ab") as out:
        process = subprocess.run([python, "-m", "sonic_hep.workflows.grid.job", directory, str(index)],
                                 cwd=workdir if os.path.isdir(workdir) else None, stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                 env={**os.environ, "SONIC_GRID_BATCH_ID": batch_id})
    return process.returncode


def describe_exit(code: int) -> str:
    """``-9`` → ``killed by SIGKILL``; ``3`` → ``exited with status 3``."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def record_lost(task: Task, index: int, code: int | None, cause: str) -> None:
    """Writes ``failed`` for a job whose process ended without a final report of its own."""
    report = task.report(index)
    if report is not None and report.state != "running":
        return
    submission = task.submission(index)
    if submission is None:
        return
    base = report or JobReport(attempt=submission.attempt, state="failed")
    base.state, base.ended, base.exit_code, base.reason = "failed", time.time(), code, cause
    base.save(task.files(index).report)


def drive(task: Task, indices: list[int], pool: PoolExecutor, max_running: int, batch_id: str) -> None:
    """Runs jobs ``indices`` on ``pool``, at most ``max_running`` at once, recording lost jobs."""
    waiting = list(indices)
    running: dict[Future, int] = {}
    description = task.description
    while waiting or running:
        while waiting and len(running) < max_running:
            index = waiting.pop(0)
            future = pool.submit(run_job_process, description.python, str(task.directory), index, description.workdir,
                                 batch_id)
            running[future] = index
        finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
        for future in finished:
            index = running.pop(future)
            try:
                code = future.result()
            except Exception as err:  # noqa: BLE001 - e.g. dask's KilledWorker: the job is lost, say why
                record_lost(task, index, None, f"lost: {type(err).__name__}: {err}")
                continue
            if code != 0:
                record_lost(task, index, code, f"{describe_exit(code)} before reporting")


class DriverExecutor(Executor, abc.ABC):
    """Base of executors whose jobs a detached driver process runs."""

    default_max_running = max(1, os.cpu_count() or 1)

    @abc.abstractmethod
    def pool(self, max_running: int) -> contextlib.AbstractContextManager[PoolExecutor]:
        """A ``concurrent.futures.Executor`` with room for ``max_running`` jobs (used by the driver)."""

    def submit(self, indices: list[int], max_running: int | None) -> dict[int, str]:
        task = self.task
        cap = max_running or self.default_max_running
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log = task.directory / "logs" / f"driver-{self.name}-{stamp}-{os.getpid()}.log"
        cmd = [task.description.python, "-m", __name__, str(task.directory), "--executor", self.name,
               "--max-running", str(cap), "--jobs", ",".join(map(str, indices)),
               "--options", json.dumps(_plain_options(self.options))]
        with open(log, "ab") as out:
            process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       cwd=task.description.workdir, start_new_session=True)
        created = psutil.Process(process.pid).create_time()
        ident = driver_id(self.name, process.pid, socket.gethostname())
        write_json(task.directory / "logs" / f"driver-{process.pid}.json",
                   {"id": ident, "pid": process.pid, "host": socket.gethostname(), "created": created,
                    "jobs": indices, "log": str(log)})
        return {index: ident for index in indices}

    def poll(self, batch_ids: dict[int, str]) -> dict[int, BatchStatus]:
        alive = {driver_id: self._driver_alive(driver_id) for driver_id in set(batch_ids.values())}
        out = {}
        for index, driver_id in batch_ids.items():
            gone = alive[driver_id] is False
            out[index] = BatchStatus("ended", f"driver {driver_id} is gone") if gone else UNKNOWN
        return out

    def _driver_alive(self, driver_id: str) -> bool | None:
        """True/False for a driver on this host; None when it runs elsewhere (cannot tell)."""
        _, _, rest = driver_id.partition(":")
        pid_text, _, host = rest.partition("@")
        if host != socket.gethostname():
            return None
        record = read_json(self.task.directory / "logs" / f"driver-{pid_text}.json") or {}
        try:
            process = psutil.Process(int(pid_text))
            return abs(process.create_time() - float(record.get("created", 0))) < 1.0 and \
                process.status() != psutil.STATUS_ZOMBIE
        except (psutil.NoSuchProcess, ValueError):
            return False


def _plain_options(options: object) -> dict:
    import dataclasses

    return dataclasses.asdict(options) if dataclasses.is_dataclass(options) else {}


@contextlib.contextmanager
def _ignore_hangup() -> Iterator[None]:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


def main(argv: list[str] | None = None) -> int:
    from .base import executor_class

    parser = argparse.ArgumentParser(prog=f"python -m {__name__}", description=__doc__)
    parser.add_argument("directory")
    parser.add_argument("--executor", required=True)
    parser.add_argument("--max-running", type=int, required=True)
    parser.add_argument("--jobs", required=True, help="comma-separated job indices")
    parser.add_argument("--options", default="{}", help="executor options as JSON")
    args = parser.parse_args(argv)
    task = Task(args.directory)
    executor = executor_class(args.executor)(task, json.loads(args.options))
    indices = [int(i) for i in args.jobs.split(",") if i]
    print(f"driver {os.getpid()} on {socket.gethostname()}: {len(indices)} jobs, at most {args.max_running} "
          f"at once ({args.executor})", flush=True)
    with _ignore_hangup(), executor.pool(args.max_running) as pool:
        drive(task, indices, pool, args.max_running, driver_id(args.executor, os.getpid(), socket.gethostname()))
    print(f"driver {os.getpid()}: all jobs ended", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
