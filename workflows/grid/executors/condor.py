"""``condor``: an HTCondor cluster per submission, through the ``htcondor2`` Python bindings.

The submit description (written to ``logs/condor-submit-*.sub`` as well, so ``condor_submit`` can
use it by hand) asks for the vanilla universe, the job's cores and memory, ``requirements``,
``max_retries`` (HTCondor restarts a failed job itself; ``retry_until`` stops for an unreadable
input, which a retry cannot fix), ``max_materialize`` for ``--max-running`` and, with ``-E
concurrency_limits=NAME``, a pool-wide limit such as the number of jobs one network link or GPU
server may feed (the pool's admin sets ``NAME_LIMIT``).

Files: by default the task directory is on a shared filesystem and jobs run in the submit
directory. ``-E transfer=true`` is for pools without one: HTCondor transfers the task's description,
the job's records and its local input files to the slot, the job runs in ``--sandbox`` mode, and
its output, report, timing and log are transferred back into ``jobs/NNNN/`` (``transfer_output_remaps``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from ....framework.extras import require
from ..batch_text import classad_string, condor_arguments, condor_text, job_name, plain, submit_key, submit_value
from ..errors import GridError, SubmitError
from ..lifecycle import BatchStatus
from .base import Executor
from .slurm import config_threads

#: HTCondor JobStatus codes
IDLE, RUNNING, REMOVED, COMPLETED, HELD, TRANSFERRING, SUSPENDED = 1, 2, 3, 4, 5, 6, 7
SANDBOX_OUTPUTS = ("output.root", "state.json", "timing.json", "job.log")


@dataclass
class CondorOptions:
    requirements: str = field(default="", metadata={"doc": "ClassAd expression slots must satisfy"})
    request_memory: str = field(default="2GB", metadata={"doc": "memory per job"})
    request_disk: str = field(default="", metadata={"doc": "scratch disk per job (e.g. 4GB)"})
    request_cpus: int = field(default=0, metadata={"doc": "cores per job (default: the config's options.threads)"})
    concurrency_limits: str = field(default="", metadata={"doc": "pool-wide limit name(s), e.g. sonic_link"})
    transfer: bool = field(default=False, metadata={"doc": "no shared filesystem: transfer inputs and outputs"})
    accounting_group: str = field(default="", metadata={"doc": "accounting group"})
    schedd: str = field(default="", metadata={"doc": "schedd name (default: the local one)"})
    extra: dict[str, str] = field(default_factory=dict, metadata={"doc": "more submit commands"})


class CondorExecutor(Executor):
    """HTCondor vanilla-universe clusters; one proc per job, in the order of ``itemdata``."""

    name = "condor"
    Options = CondorOptions

    def __init__(self, task: Any, options: dict[str, Any] | None = None):
        super().__init__(task, options)
        opts: CondorOptions = self.options  # refused here, before any job is recorded as submitted
        for option in ("requirements", "request_memory", "request_disk", "concurrency_limits", "accounting_group",
                       "schedd"):
            submit_value(getattr(opts, option), f"condor option {option}")
        for key, value in opts.extra.items():
            submit_key(key, "condor option extra")
            submit_value(str(value), f"condor option extra {key}")

    # -- the description -----------------------------------------------------------------------------
    def description(self, max_running: int | None) -> dict[str, str]:
        """The submit commands (the per-job values come from ``itemdata``)."""
        opts: CondorOptions = self.options
        task = self.task
        directory = condor_text(str(task.directory), "task directory")
        logs = f"{directory}/logs"
        desc = {
            "universe": "vanilla",
            "executable": condor_text(task.description.python, "python interpreter"),
            "transfer_executable": "false",
            "getenv": "true",
            "batch_name": job_name(f"sonic-{task.name}"),
            "output": f"{logs}/condor-$(ClusterId).$(ProcId).out",
            "error": f"{logs}/condor-$(ClusterId).$(ProcId).err",
            "log": f"{logs}/condor-$(ClusterId).log",
            "request_cpus": str(int(opts.request_cpus or config_threads(task))),
            "request_memory": opts.request_memory,
            "max_retries": str(int(task.description.max_retries)),
            "retry_until": "ExitCode == 2",
            "when_to_transfer_output": "ON_EXIT",
            "job_dir": f"{directory}/jobs/$INT(job_index,%04d)",
            "+SonicTask": classad_string(directory, "task directory"),
            "+SonicJobIndex": "$(job_index)",
        }
        if opts.transfer:
            if ";" in directory or "=" in directory:
                raise GridError(f"task directory {directory!r} holds ';' or '=', which HTCondor's "
                                f"transfer_output_remaps cannot carry; choose another --output-dir for -E transfer=true")
            desc.update({
                "arguments": condor_arguments(["-m", "sonic_hep.workflows.grid.job", ".", "$(job_index)", "--sandbox"],
                                              "job command"),
                "initialdir": "$(job_dir)",
                "should_transfer_files": "YES",
                "transfer_input_files": "$(transfer_inputs)",
                "transfer_output_files": ", ".join(SANDBOX_OUTPUTS),
                "transfer_output_remaps": '"' + ";".join(f"{n}=$(job_dir)/{n}" for n in SANDBOX_OUTPUTS) + '"',
            })
        else:
            desc.update({
                "arguments": condor_arguments(["-m", "sonic_hep.workflows.grid.job", directory, "$(job_index)"],
                                              "job command"),
                "initialdir": condor_text(task.description.workdir, "working directory"),
                "should_transfer_files": "IF_NEEDED",
            })
        if max_running:
            desc["max_materialize"] = str(int(max_running))
        for key, value in (("requirements", opts.requirements), ("request_disk", opts.request_disk),
                           ("concurrency_limits", opts.concurrency_limits),
                           ("accounting_group", opts.accounting_group)):
            if value:
                desc[key] = value
        desc.update(opts.extra)
        return desc

    def itemdata(self, indices: list[int]) -> list[dict[str, str]]:
        """One item per job: its index and (transfer mode) the files it needs (``job_dir`` follows from the index).

        Raises:
            GridError: a file to transfer whose name holds a comma or a control character (it would
                split HTCondor's comma-separated list).
        """
        items = []
        for index in indices:
            item = {"job_index": str(int(index))}
            if self.options.transfer:
                files = self.task.files(index)
                spec, _ = self.task.spec(index)
                local = [p for p in spec.inputs if "://" not in p]
                sent = [str(self.task.directory / "task.json"), str(self.task.directory / "config.yaml"),
                        str(files.spec), str(files.submission), *local]
                for path in sent:
                    if "," in plain(path, f"file to transfer for job {index}"):
                        raise GridError(f"file to transfer for job {index} {path!r} holds a comma, which HTCondor "
                                        f"reads as a list separator; rename it")
                item["transfer_inputs"] = ", ".join(condor_text(p, "file to transfer") for p in sent)
            items.append(item)
        return items

    def submit_file(self, max_running: int | None, indices: list[int]) -> str:
        """The description as a submit file for ``condor_submit`` (items inline; the last variable,
        the transfer list, takes the rest of its line, commas included)."""
        desc = self.description(max_running)
        items = self.itemdata(indices)
        keys = list(items[0])
        lines = [f"{k} = {v}" for k, v in desc.items()]
        lines.append(f"queue {', '.join(keys)} from (")
        lines += ["  " + " ".join(item[k] for k in keys) for item in items]
        return "\n".join(lines + [")", ""])

    # -- the bindings --------------------------------------------------------------------------------
    @staticmethod
    def _bindings() -> Any:
        """The ``htcondor2`` module, or a ``SubmitError`` naming the ``grid`` extra."""
        return require("htcondor2", "the condor executor", SubmitError)

    def _schedd(self) -> Any:
        htcondor2 = self._bindings()
        try:
            if self.options.schedd:
                ad = htcondor2.Collector().locate(htcondor2.DaemonType.Schedd, self.options.schedd)
                return htcondor2.Schedd(ad)
            return htcondor2.Schedd()
        except Exception as err:  # the bindings raise HTCondorException for an absent pool
            which = f" {self.options.schedd!r}" if self.options.schedd else ""
            raise SubmitError(f"cannot reach the HTCondor schedd{which}: {err} (is condor_master running? "
                              f"CONDOR_CONFIG={os.environ.get('CONDOR_CONFIG', 'unset')})") from None

    def submit(self, indices: list[int], max_running: int | None) -> dict[int, str]:
        htcondor2 = self._bindings()
        path = self.task.directory / "logs" / f"condor-submit-{time.strftime('%Y%m%d-%H%M%S')}.sub"
        path.write_text(self.submit_file(max_running, indices))
        schedd = self._schedd()
        try:
            result = schedd.submit(htcondor2.Submit(self.description(max_running)),
                                   itemdata=iter(self.itemdata(indices)))
        except Exception as err:  # noqa: BLE001 - HTCondorException and friends: nothing was queued
            raise SubmitError(f"HTCondor refused {path}: {err}") from None
        cluster, first = result.cluster(), result.first_proc()
        return {index: f"{cluster}.{first + n}" for n, index in enumerate(indices)}

    def poll(self, batch_ids: dict[int, str]) -> dict[int, BatchStatus]:
        if not batch_ids:
            return {}
        clusters = sorted({b.split(".")[0] for b in batch_ids.values()})
        constraint = " || ".join(f"ClusterId == {c}" for c in clusters)
        projection = ["ClusterId", "ProcId", "JobStatus", "HoldReason", "ExitCode", "RemoveReason"]
        schedd = self._schedd()
        seen: dict[str, BatchStatus] = {}
        for ad in schedd.query(constraint=constraint, projection=projection):
            seen[f"{ad['ClusterId']}.{ad['ProcId']}"] = _status(ad)
        missing = [b for b in batch_ids.values() if b not in seen]
        if missing:
            for ad in schedd.history(constraint=constraint, projection=projection, match=len(missing) * 2):
                seen.setdefault(f"{ad['ClusterId']}.{ad['ProcId']}", _status(ad))
        gone = BatchStatus("ended", "not in the HTCondor queue or history")
        return {index: seen.get(batch_id, gone) for index, batch_id in batch_ids.items()}


def _status(ad: Any) -> BatchStatus:
    code = int(ad.get("JobStatus", 0))
    if code in (IDLE, SUSPENDED):
        return BatchStatus("pending")
    if code == HELD:
        return BatchStatus("pending", f"held: {ad.get('HoldReason', '')}")
    if code in (RUNNING, TRANSFERRING):
        return BatchStatus("running")
    if code == REMOVED:
        return BatchStatus("ended", f"condor_rm: {ad.get('RemoveReason', 'removed')}")
    return BatchStatus("ended", f"completed, exit code {ad.get('ExitCode', '?')}")

