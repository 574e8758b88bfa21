"""Executors without a batch system of their own (a process pool, a Dask cluster) run a *driver*.

``submit`` starts ``python -m sonic_hep.workflows.grid.executors.driver DIR ...`` detached from the
terminal and returns, as ``sbatch`` does. The driver keeps at most ``max_running`` jobs in flight on
a ``concurrent.futures.Executor`` (threads that start job processes, or a Dask client's executor),
and when a job process dies without reporting (killed by a signal, out of memory) it writes the
job's ``failed`` report with the cause. The cap is the task's, not the driver's: a resubmission starts
a second driver while the first still runs jobs, so every job also holds one of the task's
:class:`Slots`. ``poll`` asks whether the driver process still lives: while
it does, its jobs are pending or running; once it is gone, a job that never reported has failed.
"""

from __future__ import annotations

import abc
import argparse
import contextlib
import fcntl
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

from ..errors import UnwritableRecord
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
    """``-9`` → ``killed by SIGKILL``; ``3`` → ``exited with status 3``; the wrapper's "cannot write" in words."""
    from ..job import EXIT_UNWRITABLE  # here: the wrapper's imports would slow every ``sonic status``

    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if code == EXIT_UNWRITABLE:
        return f"exited with status {code} (it could not write its record or log: full disk, quota or read-only folder)"
    return f"exited with status {code}"


def record_lost(task: Task, index: int, code: int | None, cause: str) -> None:
    """Writes ``failed`` for a job whose process ended without a final report of its own.

    A report that cannot be written (the task folder filled up) is said in the driver's log, and the
    driver goes on with the other jobs: dying here would leave every job it holds blamed on a dead driver.
    """
    report = task.report(index)
    if report is not None and report.state != "running":
        return
    submission = task.submission(index)
    if submission is None:
        return
    base = report or JobReport(attempt=submission.attempt, state="failed")
    base.state, base.ended, base.exit_code, base.reason = "failed", time.time(), code, cause
    try:
        base.save(task.files(index).report)
    except UnwritableRecord as err:
        with contextlib.suppress(OSError):
            print(f"driver {os.getpid()}: job {index} {cause}, and its report is not recorded: {err}", flush=True)


class Slots:
    """``max_running`` places to run a job, shared by every driver of a task on this host.

    Each place is a lock file ``logs/slots/N.lock``; a driver runs a job only while it holds one (an
    exclusive ``flock``, which the kernel releases when the driver dies, so a killed driver frees its
    places). Two drivers of one task (a resubmission while the first submission still runs) thus run at
    most ``max_running`` jobs together, not ``max_running`` each.
    """

    def __init__(self, task: Task, count: int):
        self.folder = task.directory / "logs" / "slots"
        self.count = count
        self.held: dict[int, int | None] = {}  # place → open file descriptor holding its lock
        self.shared = True

    def take(self) -> int | None:
        """A free place, now held by this driver; None when every place is held."""
        for place in range(self.count):
            if place in self.held:
                continue
            try:
                fd = self._lock(place)
            except BlockingIOError:
                continue
            except OSError as err:  # the lock files cannot be made (a full or read-only task folder)
                if self.shared:
                    print(f"driver {os.getpid()}: --max-running counts only this submission's jobs: {err}",
                          flush=True)
                self.shared, fd = False, None
            self.held[place] = fd
            return place
        return None

    def _lock(self, place: int) -> int | None:
        """The descriptor holding place ``place`` (BlockingIOError: another driver holds it)."""
        if not self.shared:
            return None
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder / f"{place}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def give(self, place: int) -> None:
        fd = self.held.pop(place)
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the lock


def drive(task: Task, indices: list[int], pool: PoolExecutor, max_running: int, batch_id: str,
          poll_s: float = 0.5) -> None:
    """Runs jobs ``indices`` on ``pool``, at most ``max_running`` at once across the task's drivers
    (:class:`Slots`), recording lost jobs."""
    waiting = list(indices)
    running: dict[Future, tuple[int, int]] = {}  # → (job, place)
    description = task.description
    slots = Slots(task, max_running)
    told = False
    while waiting or running:
        while waiting and len(running) < max_running:
            place = slots.take()
            if place is None:
                if not told:
                    print(f"driver {os.getpid()}: waiting for a place to run: the task's {max_running} places "
                          f"(--max-running) are in use, some by another submission's jobs", flush=True)
                    told = True
                break
            index = waiting.pop(0)
            future = pool.submit(run_job_process, description.python, str(task.directory), index, description.workdir,
                                 batch_id)
            running[future] = (index, place)
        if not running:
            time.sleep(poll_s)  # every place is held by another driver: look again soon
            continue
        blocked = bool(waiting) and len(running) < max_running
        finished, _ = wait(list(running), timeout=poll_s if blocked else None, return_when=FIRST_COMPLETED)
        for future in finished:
            index, place = running.pop(future)
            slots.give(place)
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
    with _ignore_hangup(), executor.pool(min(args.max_running, len(indices))) as pool:
        drive(task, indices, pool, args.max_running, driver_id(args.executor, os.getpid(), socket.gethostname()))
    print(f"driver {os.getpid()}: all jobs ended", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
