"""``slurm``: one job array per submission (``sbatch --array=...%N``), watched with squeue and sacct.

The array's ``%N`` throttle is Slurm's own cap on running tasks, so ``--max-running`` holds even
when this machine is off. The throttle counts only its own array, so a resubmission whose jobs, with
those of earlier arrays of the task still queued or running, could exceed the cap waits for those
arrays (``--dependency=afterany``): retried jobs start once they have ended, never beside them above
it. Task ids above Slurm's MaxArraySize (1001 by default) go into further arrays with an index offset
(the cap then holds per array). Each array task runs the job wrapper, which writes its own log;
Slurm's output (``logs/slurm-<array>_<task>.out``) only catches what happens before the wrapper starts.

``poll`` asks ``squeue`` (which knows pending, running and recently ended jobs), then ``sacct``
for jobs squeue has forgotten; without accounting, a job Slurm no longer knows has ended.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import yaml

from ..batch_text import job_name, plain, sbatch_option, sbatch_value, shell_words
from ..errors import PartialSubmission, SubmitError
from ..lifecycle import BatchStatus
from ..task import Task
from .base import Executor, run_command

PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "SUSPENDED",
           "STOPPED", "RESIZING"}
RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING"}


@dataclass
class SlurmOptions:
    partition: str = field(default="", metadata={"doc": "partition (sbatch --partition)"})
    time: str = field(default="", metadata={"doc": "wall-time limit per job (sbatch --time, e.g. 02:00:00)"})
    mem: str = field(default="", metadata={"doc": "memory per job (sbatch --mem, e.g. 4G)"})
    cpus_per_task: int = field(default=0, metadata={"doc": "cores per job (default: the config's options.threads)"})
    account: str = field(default="", metadata={"doc": "account to charge (sbatch --account)"})
    qos: str = field(default="", metadata={"doc": "quality of service (sbatch --qos)"})
    extra: list[str] = field(default_factory=list, metadata={"doc": "more sbatch options, e.g. [--gres=gpu:1]"})
    max_array_size: int = field(default=1000, metadata={"doc": "largest array index Slurm accepts (MaxArraySize-1)"})


def compress(indices: list[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` → ``"0-2,5,7-8"`` (Slurm's array syntax)."""
    parts: list[str] = []
    ordered = sorted(set(indices))
    start = prev = ordered[0]
    for i in ordered[1:] + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(parts)


class SlurmExecutor(Executor):
    """Job arrays on Slurm (``sbatch``/``squeue``/``sacct`` on PATH; ``SLURM_CONF`` as usual)."""

    name = "slurm"
    Options = SlurmOptions

    def __init__(self, task: Task, options: dict | None = None):
        super().__init__(task, options)
        opts: SlurmOptions = self.options  # refused here, before any job is recorded as submitted
        for option in ("partition", "time", "mem", "account", "qos"):
            sbatch_value(getattr(opts, option), f"slurm option {option}")
        for extra in opts.extra:
            sbatch_option(extra, "slurm option extra")

    def script(self, indices: list[int], offset: int, max_running: int | None, after: tuple[str, ...] = ()) -> str:
        """The batch script of one array (job index = array index + offset), started only after the arrays
        ``after`` have ended.

        Every value is checked and quoted (:mod:`..batch_text`): a name or path with a line break is
        refused, the job name is sanitised, a path with spaces stays one value.
        """
        opts: SlurmOptions = self.options
        task = self.task
        directory = plain(str(task.directory), "task directory")
        array = compress([i - offset for i in indices]) + (f"%{max_running}" if max_running else "")
        cpus = opts.cpus_per_task or config_threads(task)
        lines = ["#!/bin/bash", f"#SBATCH --job-name={job_name('sonic-' + task.name)}", f"#SBATCH --array={array}",
                 f"#SBATCH --output={sbatch_value(f'{directory}/logs/slurm-%A_%a.out', 'task directory')}",
                 f"#SBATCH --chdir={sbatch_value(task.description.workdir, 'working directory')}",
                 f"#SBATCH --cpus-per-task={int(cpus)}", "#SBATCH --ntasks=1"]
        for option, value in (("partition", opts.partition), ("time", opts.time), ("mem", opts.mem),
                              ("account", opts.account), ("qos", opts.qos)):
            if value:
                lines.append(f"#SBATCH --{option}={sbatch_value(value, f'slurm option {option}')}")
        lines += [f"#SBATCH {sbatch_option(extra, 'slurm option extra')}" for extra in opts.extra]
        if after:
            lines.append(f"#SBATCH --dependency=afterany:{':'.join(str(int(a)) for a in after)}")
        python, module, name = self.job_command("")[:3]
        lines += ["", f"# task {directory}: jobs {compress(indices)}",
                  f"exec {shell_words([python, module, name, directory], 'job command')} \"$SLURM_ARRAY_TASK_ID\" "
                  f"--offset {int(offset)}", ""]
        return "\n".join(lines)

    def submit(self, indices: list[int], max_running: int | None) -> dict[int, str]:
        size = self.options.max_array_size
        batch_ids: dict[int, str] = {}
        windows: dict[int, list[int]] = {}
        for index in sorted(indices):
            windows.setdefault(index // size * size, []).append(index)
        after = self._earlier_arrays(indices, max_running) if max_running else ()
        for offset, window in windows.items():
            path = self.task.directory / "logs" / f"slurm-submit-{time.strftime('%Y%m%d-%H%M%S')}-{offset}.sh"
            path.write_text(self.script(window, offset, max_running, after))
            result = run_command(["sbatch", "--parsable", str(path)], "sbatch")
            if result.returncode != 0:
                message = f"sbatch refused {path}: {result.stderr.strip() or result.stdout.strip()}"
                raise PartialSubmission(message, batch_ids) if batch_ids else SubmitError(message)
            array_id = result.stdout.strip().split(";")[0]
            batch_ids.update({index: f"{array_id}_{index - offset}" for index in window})
        return batch_ids

    def poll(self, batch_ids: dict[int, str]) -> dict[int, BatchStatus]:
        if not batch_ids:
            return {}
        arrays = sorted({batch_id.split("_")[0] for batch_id in batch_ids.values()})
        seen = self._squeue(arrays)
        missing = [b for b in batch_ids.values() if b not in seen]
        if missing:
            seen.update(self._sacct(sorted({b.split("_")[0] for b in missing})))
        out = {}
        for index, batch_id in batch_ids.items():
            out[index] = seen.get(batch_id, BatchStatus("ended", "no longer known to Slurm"))
        return out

    def _earlier_arrays(self, indices: list[int], max_running: int) -> tuple[str, ...]:
        """The arrays a new one of ``indices`` must wait for: the task's other arrays still queued or running,
        when their tasks and ``indices`` together could run more than ``max_running`` at once."""
        chosen = set(indices)
        submissions = [self.task.submission(i) for i in self.task.indices if i not in chosen]
        arrays = sorted({s.batch_id.split("_")[0] for s in submissions if s is not None and s.batch_id})
        if not arrays:
            return ()
        active = [b for b, status in self._squeue(arrays).items() if status.state in ("pending", "running")]
        if len(active) + len(indices) <= max_running:
            return ()  # a fleet adding a server beside the running ones, a small resubmission
        return tuple(sorted({b.split("_")[0] for b in active}))

    @staticmethod
    def _status(state: str, reason: str) -> BatchStatus:
        state = state.split()[0].rstrip("+") if state else "UNKNOWN"
        if state in PENDING:
            return BatchStatus("pending", "" if reason in ("None", "") else f"slurm: {reason}")
        if state in RUNNING:
            return BatchStatus("running")
        detail = f"slurm {state}" + (f": {reason}" if reason and reason not in ("None", "") else "")
        return BatchStatus("ended", detail)

    def _squeue(self, arrays: list[str]) -> dict[str, BatchStatus]:
        result = run_command(["squeue", "--array", "--states=all", "--noheader", "--format=%i|%T|%r",
                              f"--jobs={','.join(arrays)}"], "squeue")
        if result.returncode != 0:
            if "Invalid job id" in result.stderr:
                return {}
            raise SubmitError(f"squeue failed: {result.stderr.strip()}")
        out = {}
        for line in result.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3:
                out[parts[0]] = self._status(parts[1], parts[2])
        return out

    def _sacct(self, arrays: list[str]) -> dict[str, BatchStatus]:
        result = run_command(["sacct", "--noheader", "--parsable2", "--allocations",
                              "--format=JobID,State,ExitCode", f"--jobs={','.join(arrays)}"], "sacct")
        if result.returncode != 0:  # no accounting storage: Slurm forgot these jobs, so they ended
            return {}
        out = {}
        for line in result.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3:
                status = self._status(parts[1], "")
                if status.state == "ended":
                    status = BatchStatus("ended", f"{status.detail}, exit code {parts[2]}")
                out[parts[0]] = status
        return out


def config_threads(task: Task) -> int:
    raw = yaml.safe_load((task.directory / "config.yaml").read_text()) or {}
    return int((raw.get("options") or {}).get("threads", 1)) or 1

