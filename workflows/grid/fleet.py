"""Fleets: Triton servers run as batch jobs through the grid's executors, found by clients in a directory.

::

    sonic fleet start FLEET --config miniaod --servers 2 --executor slurm --gpus-per-server 1 --wait
    sonic submit miniaod -i 'data/*.root' -d task --executor slurm --fleet FLEET   # jobs find the servers
    sonic fleet status FLEET
    sonic fleet stop FLEET                      # every server job ends; nothing is left in squeue

The fleet directory is a task directory whose jobs are servers, so every executor (local, Slurm, HTCondor,
Dask) runs them exactly as it runs client jobs (``job.py`` hands a fleet's job to :mod:`.fleet_member`)::

    FLEET/
      fleet.json           what the servers serve and how (repositories, device, binding, TLS, heartbeat,
                           resources, autoscaling): FleetSpec
      task.json, config.yaml   what the executors read (TaskDescription; options.threads = cores per server)
      servers/NNNN.json    the live servers' entries (address, models, versions, health, heartbeat): fleet_directory
      models/MODEL.json    the versions of a model rolled out with ``sonic fleet update``: fleet_rollout
      users/HOST-PID-START.json   which version of each model a running client job uses: fleet_use
      jobs/NNNN/           per server job: submit.json, state.json, job.log, command.sh, and ``stop``
                           when that server is asked to leave
      stop                 the whole fleet is stopping: the manager and every server job end
      manager.json         the autoscaler process (fleet_manager), when the fleet has one
      logs/                batch logs; autoscaler.jsonl (every decision with its metric)

A server job's state comes from the same two witnesses as a client job's (``lifecycle``): its own report
(``running``; ``done`` when stopped cleanly; ``failed`` with why) and the batch system's view.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ...framework.inference.serving import (FLEET_FILE, HEARTBEAT_S, TTL_S, BadEntry, Entry, deregister,
                                                   read_entries, scan)
from ...framework.inference import ProcessId
from ...framework.inference.serving import ServerOptions, tls_problem, with_default
from .batch_text import plain
from .errors import GridError
from .executors import executor_class
from .executors.base import parse_options, run_command
from .fleet_drain import leaving_by
from .lifecycle import UNKNOWN, BatchStatus, State, resolve
from .records import read_json, write_json
from .submit import hand_over
from .task import Task, TaskDescription

log = logging.getLogger(__name__)

STOP_FILE = "stop"
MANAGER_FILE = "manager.json"
DECISIONS = "logs/autoscaler.jsonl"
TASKS_FILE = "tasks.json"

#: ``--cpus-per-server/--mem/--time/--gpus-per-server`` as each executor's options (local: the node's own resources)
RESOURCES: dict[str, dict[str, str]] = {
    "slurm": {"cpus": "cpus_per_task", "mem": "mem", "time": "time", "gpus": "extra:--gres=gpu:{}"},
    "condor": {"cpus": "request_cpus", "mem": "request_memory", "gpus": "extra:request_gpus={}"},
    "dask": {"cpus": "cores", "mem": "memory", "time": "walltime"},
    "local": {},
}

#: where the autoscaler reads the fleet's load (``FleetSpec.scale_metric``)
SCALE_METRICS = ("statistics", "prometheus")

#: how each batch system ends a job that did not leave when asked (local and dask: the job's process)
CANCEL = {"slurm": ["scancel"], "condor": ["condor_rm"]}


@dataclass
class FleetSpec(ServerOptions):
    """``fleet.json``: how each server job runs its server (every :class:`ServerOptions` field: backend, strict,
    python_shm_mb ...; ``sonic fleet start --help``) and the fleet's own settings.

    The servers' TLS is ``tls_cert``/``tls_key``/``tls_root_cert`` as for any server; ``tls_ca`` (what clients
    trust: default the server certificate itself) and ``tls_client_cert``/``tls_client_key`` (the manager's
    certificate, for mutual TLS) are the client side, which clients write as ``root_certificates``,
    ``certificate_chain`` and ``private_key``.
    """

    repository: list[str]
    host: str = with_default("host", "0.0.0.0")
    startup_timeout: float = with_default("startup_timeout", 300.0)
    #: explicit: each server loads new versions of a model beside the old ones (``sonic fleet update``)
    model_control: str = with_default("model_control", "explicit")
    advertise: str = ""
    tls_ca: str | None = None
    tls_client_cert: str | None = None
    tls_client_key: str | None = None
    heartbeat_s: float = HEARTBEAT_S
    ttl_s: float = TTL_S
    drain_s: float = 3.0
    executor: str = "local"
    executor_options: dict[str, Any] = field(default_factory=dict)
    autoscale: dict[str, Any] | None = None
    created: float = field(default_factory=time.time)
    #: cards per server job: the batch system's request, and on the local executor each job's own slice of the
    #: node's cards (``fleet_member.member_options``); 0: CPU servers
    gpus_per_server: int = 0
    #: "" (none), "local" (the manager runs Debian's prometheus for the fleet) or the URL of a site's Prometheus
    #: that scrapes ``prometheus/targets.json`` (``fleet_prometheus``)
    prometheus: str = ""
    prometheus_scrape_s: float = 5.0
    #: the autoscaler's load: "statistics" (its own reading of Triton's statistics, queue ms per request) or
    #: "prometheus" (SuperSONIC's rule, queue per execution)
    scale_metric: str = "statistics"

    def __post_init__(self) -> None:
        if self.heartbeat_s <= 0 or self.ttl_s <= self.heartbeat_s:
            raise GridError(f"--ttl-s ({self.ttl_s}) must exceed --heartbeat-s ({self.heartbeat_s}) > 0: an entry "
                            f"must outlive the gap between two heartbeats")
        if self.prometheus not in ("", "local") and not self.prometheus.startswith(("http://", "https://")):
            raise GridError(f"--prometheus must be local or a URL such as http://HOST:9090, not {self.prometheus!r}")
        if self.scale_metric not in SCALE_METRICS:
            raise GridError(f"--scale-metric must be one of {', '.join(SCALE_METRICS)}, not {self.scale_metric!r}")
        if self.scale_metric == "prometheus" and not self.prometheus:
            raise GridError("--scale-metric prometheus needs a Prometheus: --prometheus local or --prometheus URL")
        if not self.prometheus_scrape_s > 0:
            raise GridError(f"--prometheus-scrape-s must be positive, got {self.prometheus_scrape_s}")
        problem = tls_problem(self)
        if problem is not None:
            raise GridError(f"--{problem.key.replace('_', '-')}: {problem.message}")
        for path in (self.tls_ca, self.tls_client_cert, self.tls_client_key):
            if path and not os.path.isfile(path):
                raise GridError(f"TLS file {path} does not exist")

    def advertised_host(self) -> str:
        """The host name clients use: ``advertise``, else the bound address, else (every interface) the node's name."""
        if self.advertise:
            return self.advertise
        if self.host not in ("0.0.0.0", "::", ""):
            return self.host
        return socket.getfqdn()

    @property
    def client_root_certificates(self) -> str | None:
        """What clients trust: the CA that signed the server certificate, or the certificate itself."""
        return self.tls_ca or self.tls_cert


def executor_options(executor: str, given: dict[str, Any], cpus: int | None = None, mem: str | None = None,
                     time_limit: str | None = None, gpus: int = 0) -> dict[str, Any]:
    """``given`` (``-E``) plus the fleet's resources in the executor's own words (``RESOURCES``)."""
    table = RESOURCES.get(executor, {})
    options = dict(given)
    for resource, value in (("cpus", cpus), ("mem", mem), ("time", time_limit), ("gpus", gpus or None)):
        if value is None:
            continue
        target = table.get(resource)
        if target is None:
            log.info("executor %s has no setting for --%s; the server job uses what its node gives it", executor,
                     resource)
            continue
        if target.startswith("extra:"):
            text = target[len("extra:"):].format(value)
            if executor == "condor":
                key, _, val = text.partition("=")
                options["extra"] = {**dict(options.get("extra") or {}), key: val}
            else:
                given = options.get("extra") or []
                if isinstance(given, str):  # as typed after -E: a YAML list ([a, b]) or one option, not its letters
                    given = yaml.safe_load(given) if given.lstrip().startswith("[") else [given]
                options["extra"] = [*given, text]
        else:
            options.setdefault(target, value)
    return options


@dataclass
class Member:
    """One server job as ``sonic fleet status`` shows it."""

    index: int
    state: State
    reason: str = ""
    batch_id: str | None = None
    entry: Entry | None = None
    expired: str = ""
    stopping: bool = False

    @property
    def name(self) -> str:
        return f"{self.index:04d}"

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "state": self.state, "reason": self.reason,
                "batch_id": self.batch_id, "address": self.entry.address if self.entry else None,
                "models": sorted(self.entry.models) if self.entry else [], "registered": self.entry is not None,
                "versions": self.entry.versions if self.entry else {},
                "version_errors": self.entry.version_errors if self.entry else {},
                "gpus": self.entry.gpus if self.entry else None,
                "expired": self.expired, "stopping": self.stopping}


class Fleet:
    """An existing fleet directory.

    Raises:
        GridError: when ``directory`` holds no fleet.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory).resolve()
        data = read_json(self.directory / FLEET_FILE)
        if data is None:
            raise GridError(f"{str(directory)!r} is not a fleet directory (no {FLEET_FILE}); "
                            f"start one with `sonic fleet start {directory} --repository DIR`")
        self.spec = FleetSpec(**data)
        Task(self.directory)  # the executors' view must be readable too

    @property
    def task(self) -> Task:
        """The executors' view of the fleet, read afresh (the manager adds server jobs while others look)."""
        return Task(self.directory)

    # -- creation --------------------------------------------------------------------------------------
    @classmethod
    def create(cls, directory: str | os.PathLike, spec: FleetSpec, servers: int, cpus: int = 1) -> Fleet:
        """Writes a new fleet directory for ``servers`` server jobs (none submitted yet)."""
        root = Path(plain(str(directory), "fleet directory")).resolve()
        if (root / FLEET_FILE).exists():
            raise GridError(f"{root} already holds a fleet; stop it (`sonic fleet stop {directory}`) and start the "
                            f"next one in a new directory")
        if root.exists() and any(root.iterdir()):
            raise GridError(f"{root} exists and is not a fleet directory; choose an empty or new directory")
        parse_options(executor_class(spec.executor), spec.executor_options)  # a typo fails before any file
        if str(spec.executor_options.get("transfer", "")).lower() in ("true", "1", "yes"):
            raise GridError("a fleet needs a filesystem its server jobs and clients share (the directory is how "
                            "they find each other): drop -E transfer=true")
        for sub in ("jobs", "logs", "servers"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        # client jobs of any account record there the versions they use (fleet_use.py); each may create its own
        # record and remove no other's, as in /tmp
        (root / "users").mkdir(exist_ok=True)
        (root / "users").chmod(0o1777)
        (root / "config.yaml").write_text(yaml.safe_dump({"process": "fleet", "options": {"threads": int(cpus)}}))
        write_json(root / FLEET_FILE, asdict(spec))
        description = TaskDescription(name=f"fleet-{root.name}", config_source=str(root / FLEET_FILE), overrides=[],
                                      workdir=plain(os.getcwd(), "working directory"), inputs=[], splitting={},
                                      njobs=0, executor=spec.executor, executor_options=dict(spec.executor_options),
                                      max_retries=0)
        write_json(root / "task.json", asdict(description))
        fleet = cls(root)
        fleet._grow(servers)
        return fleet

    def _grow(self, count: int) -> list[int]:
        """Adds ``count`` job folders (not yet submitted); returns their indices."""
        description = self.task.description
        first = description.njobs
        indices = list(range(first, first + count))
        for index in indices:
            folder = self.directory / "jobs" / f"{index:04d}"
            folder.mkdir(parents=True, exist_ok=True)
            command = [description.python, "-m", "sonic_hep.workflows.grid.job", str(self.directory), str(index)]
            (folder / "command.sh").write_text(f"#!/bin/sh\n# server {index} of fleet {self.directory}\n"
                                               f"cd {_quote(description.workdir)} || exit 1\nexec "
                                               f"{' '.join(_quote(w) for w in command)}\n")
            (folder / "command.sh").chmod(0o755)
        description.njobs = first + count
        write_json(self.directory / "task.json", asdict(description))
        return indices

    # -- membership ------------------------------------------------------------------------------------
    def add(self, count: int = 1) -> list[int]:
        """Submits ``count`` new server jobs; returns their indices."""
        if self.stopping:
            raise GridError(f"fleet {self.directory} is stopping; start a new one")
        indices = self._grow(count)
        # the cap is the task's, counting server jobs still running from earlier submissions: every one may run
        hand_over(self.task, indices, self.spec.executor, self.spec.executor_options, self.task.njobs)
        log.info("fleet %s: submitted server job(s) %s to %s", self.directory, indices, self.spec.executor)
        return indices

    def retire(self, index: int) -> None:
        """Asks one server job to leave: it removes its entry, lets requests drain, stops its server and ends."""
        (self.task.files(index).directory / STOP_FILE).write_text(f"asked to stop at {time.time()}\n")

    @property
    def stopping(self) -> bool:
        return (self.directory / STOP_FILE).exists()

    def rescale(self, **changes: float) -> dict[str, Any]:
        """Changes the autoscaler's settings (bounds, threshold, window, idle time) while the fleet runs: the
        manager reads them before every decision. Returns the new settings."""
        from .fleet_autoscale import Rule

        settings = {**(self.spec.autoscale or {}), **{k: v for k, v in changes.items() if v is not None}}
        Rule(**{k: v for k, v in settings.items() if k != "stop_with_tasks"})  # refused before anything changes
        self.spec.autoscale = settings
        write_json(self.directory / FLEET_FILE, asdict(self.spec))
        return settings

    def add_task(self, task_directory: str | os.PathLike) -> None:
        """Records a task whose jobs use the fleet (the manager's ``stop_with_tasks`` watches them)."""
        path = self.directory / TASKS_FILE
        listed = read_json(path) or []
        if str(task_directory) not in listed:
            write_json(path, [*listed, str(task_directory)])

    def members(self) -> list[Member]:
        """Every server job with its state (report + batch system), its entry and whether it was asked to stop."""
        task = self.task
        submissions = {i: task.submission(i) for i in task.indices}
        batch_ids = {i: s.batch_id for i, s in submissions.items() if s is not None and s.batch_id}
        polled: dict[int, BatchStatus] = {}
        reports = {i: task.report(i) for i in task.indices}
        ask = {i: b for i, b in batch_ids.items() if reports[i] is None or reports[i].state == "running"}
        if ask:
            try:
                polled = executor_class(self.spec.executor)(task, self.spec.executor_options).poll(ask)
            except GridError as err:
                log.warning("cannot ask %s about the server jobs: %s", self.spec.executor, err)
        entries = {e.name: e for e in read_entries(self.directory)}
        out = []
        for index in task.indices:
            report = reports[index]
            state, reason = resolve(submissions[index] is not None, report.state if report else "none",
                                    polled.get(index, UNKNOWN), report.reason if report else "")
            entry = entries.get(f"{index:04d}")
            out.append(Member(index, state, reason, batch_ids.get(index), entry, entry.expired() if entry else "",
                              self.stopping or (task.files(index).directory / STOP_FILE).exists()))
        return out

    def bad_entries(self) -> list[BadEntry]:
        """Files in ``servers/`` that clients skip (wrong shape), with their problem."""
        return scan(self.directory)[1]

    def cancel(self, member: Member) -> None:
        """Ends a server job that did not leave when asked: the batch system's cancel, or SIGTERM to its
        process on this host (local, dask) after checking it is still that job."""
        command = CANCEL.get(self.spec.executor)
        if command and member.batch_id:
            run_command([*command, member.batch_id], f"cancelling server job {member.index}")
            return
        report = self.task.report(member.index)
        if report is None or report.host != socket.gethostname():
            return
        process = ProcessId.of(report.pid)
        if process is not None and "sonic_hep.workflows.grid.job" in " ".join(process.cmdline) and \
                str(self.directory) in process.cmdline:
            try:
                os.kill(report.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    # -- the whole fleet -------------------------------------------------------------------------------
    def stop(self, timeout: float = 60.0, poll_s: float = 0.5) -> list[Member]:
        """Stops the autoscaler and every server job; returns the members as they ended.

        Each server job is asked to leave (the fleet's ``stop`` file); one still running after ``timeout``
        seconds, and after the time it said it would need to leave (``fleet_drain.leaving_by``: a server with many
        model instances takes longer to tear down), is cancelled through its batch system, and waited for as long
        again.
        """
        (self.directory / STOP_FILE).write_text(f"stopped at {time.time()}\n")
        manager = self.manager()
        if manager is not None:
            try:
                os.kill(manager.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        cancelled = False
        for member in self.members():
            if member.state == "pending" and self.spec.executor in CANCEL:
                self.cancel(member)  # queued, never started: nothing to drain
        while True:
            members = self.members()
            left = [m for m in members if m.state in ("pending", "running")]
            if not left and (manager is None or not manager.alive()):
                for member in members:
                    if member.entry is not None:  # a server job killed with SIGKILL could not remove its own
                        deregister(self.directory, member.name)
                return members
            # a server job still tearing its server down within the bound it announced is not cancelled half-way
            leaving = not cancelled and any(leaving_by(self.task.files(m.index).directory) > time.time() for m in left)
            if time.monotonic() > deadline and not leaving:
                if cancelled:
                    raise GridError(f"server jobs {[m.index for m in left]} of {self.directory} still "
                                    f"{'/'.join(sorted({m.state for m in left}))} after cancelling them")
                for member in left:
                    log.warning("server job %d did not stop within %.0f s; cancelling it", member.index, timeout)
                    self.cancel(member)
                cancelled, deadline = True, time.monotonic() + timeout
            time.sleep(poll_s)

    def manager(self) -> ProcessId | None:
        """The autoscaler process, while it runs."""
        record = read_json(self.directory / MANAGER_FILE)
        if not record:
            return None
        process = ProcessId.from_dict(record["process"])
        return process if process.alive() else None

    def decisions(self) -> list[dict[str, Any]]:
        """The autoscaler's decisions so far (``logs/autoscaler.jsonl``)."""
        path = self.directory / DECISIONS
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def wait_ready(self, count: int, timeout: float, poll_s: float = 0.5) -> list[Entry]:
        """Waits until ``count`` servers registered; a server job that failed meanwhile ends the wait (with why)."""
        deadline = time.monotonic() + timeout
        while True:
            members = self.members()
            live = [m.entry for m in members if m.entry is not None and not m.expired]
            if len(live) >= count:
                return live
            failed = [m for m in members if m.state == "failed"]
            if failed:
                raise GridError(f"server job {failed[0].index} of {self.directory} failed: {failed[0].reason} "
                                f"(log {self.task.files(failed[0].index).log})")
            if time.monotonic() > deadline:
                raise GridError(f"{len(live)} of {count} servers of {self.directory} ready after {timeout:.0f} s; "
                                f"`sonic fleet status {self.directory}` shows why")
            time.sleep(poll_s)


def start_manager(fleet: Fleet) -> ProcessId:
    """Starts the autoscaler (``fleet_manager``) detached from the terminal, as the local executor's driver."""
    import subprocess

    log_path = fleet.directory / "logs" / f"manager-{time.strftime('%Y%m%d-%H%M%S')}.log"
    with open(log_path, "ab") as out:
        process = subprocess.Popen([sys.executable, "-m", "sonic_hep.workflows.grid.fleet_manager",
                                    str(fleet.directory)], stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, cwd=fleet.task.description.workdir, start_new_session=True)
    ident = ProcessId.of(process.pid)
    if ident is None:
        raise GridError(f"the fleet's autoscaler exited at once; see {log_path}")
    write_json(fleet.directory / MANAGER_FILE, {"process": ident.to_dict(), "log": str(log_path)})
    return ident


def _quote(word: str) -> str:
    import shlex

    return shlex.quote(word)

