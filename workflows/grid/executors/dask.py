"""``dask``: jobs on a Dask cluster — a LocalCluster (default), a running scheduler, or dask-jobqueue.

* default: a ``LocalCluster`` of ``max_running`` single-threaded worker processes on this machine;
* ``-E scheduler=tcp://host:8786``: an existing cluster (its workers need this environment and the
  task directory on a shared filesystem);
* ``-E cluster=slurm`` (``pbs``, ``sge``, ``lsf``, ``htcondor``, ``oar``, ``moab``): dask-jobqueue starts
  ``max_running`` workers as batch jobs, with ``cores``/``memory``/``queue``/``walltime``.

Each Dask task starts the job as its own process, exactly as the local executor does, so a job
killed on a worker is reported the same way (see ``driver``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import Executor as PoolExecutor
from dataclasses import dataclass, field

from ....framework.extras import require
from ..errors import GridError
from .driver import DriverExecutor

JOBQUEUE = {"slurm": "SLURMCluster", "pbs": "PBSCluster", "sge": "SGECluster", "lsf": "LSFCluster",
            "htcondor": "HTCondorCluster", "oar": "OARCluster", "moab": "MoabCluster"}


@dataclass
class DaskOptions:
    scheduler: str = field(default="", metadata={"doc": "address of a running scheduler (tcp://host:port)"})
    cluster: str = field(default="", metadata={"doc": f"dask-jobqueue batch system: {', '.join(JOBQUEUE)}"})
    cores: int = field(default=1, metadata={"doc": "cores per jobqueue worker job"})
    memory: str = field(default="2GiB", metadata={"doc": "memory per jobqueue worker job"})
    queue: str = field(default="", metadata={"doc": "jobqueue queue/partition"})
    walltime: str = field(default="", metadata={"doc": "jobqueue wall-time limit (e.g. 01:00:00)"})
    job_extra: list[str] = field(default_factory=list,
                                 metadata={"doc": "extra batch directives for jobqueue workers"})


class DaskExecutor(DriverExecutor):
    """Jobs as Dask tasks; the driver holds the client (and the cluster it started)."""

    name = "dask"
    Options = DaskOptions

    @contextlib.contextmanager
    def pool(self, max_running: int) -> Iterator[PoolExecutor]:
        distributed = require("distributed", "the dask executor", GridError)
        Client, LocalCluster = distributed.Client, distributed.LocalCluster  # noqa: N806 - the library's names
        opts: DaskOptions = self.options
        with contextlib.ExitStack() as stack:
            if opts.scheduler:
                cluster = None
                client = stack.enter_context(Client(opts.scheduler))
            elif opts.cluster:
                cluster = stack.enter_context(self._jobqueue_cluster(opts))
                cluster.scale(jobs=max_running)
                client = stack.enter_context(Client(cluster))
            else:
                cluster = stack.enter_context(LocalCluster(n_workers=max_running, threads_per_worker=1,
                                                           processes=True, dashboard_address=None))
                client = stack.enter_context(Client(cluster))
            print(f"dask: {type(cluster).__name__ if cluster else 'scheduler'} {client.scheduler.address}", flush=True)
            yield client.get_executor(pure=False)

    def _jobqueue_cluster(self, opts: DaskOptions):  # noqa: ANN202 - a dask_jobqueue.JobQueueCluster
        if opts.cluster not in JOBQUEUE:
            raise GridError(f"dask cluster {opts.cluster!r} is not one of {sorted(JOBQUEUE)}")
        jobqueue = require("dask_jobqueue", "the dask executor's cluster option", GridError)
        kwargs = {"cores": opts.cores, "memory": opts.memory, "processes": 1,
                  "log_directory": str(self.task.directory / "logs"), "python": self.task.description.python,
                  "job_extra_directives": list(opts.job_extra)}
        if opts.queue:
            kwargs["queue"] = opts.queue
        if opts.walltime:
            kwargs["walltime"] = opts.walltime
        return getattr(jobqueue, JOBQUEUE[opts.cluster])(**kwargs)
