"""One server job of a fleet: what ``python -m sonic_hep.workflows.grid.job FLEET INDEX`` runs for a fleet.

1. reports ``running`` (host, pid, batch id) in ``jobs/NNNN/state.json`` and sends its output to ``job.log``;
2. starts a Triton server on this node (:class:`~sonic_hep.framework.inference.serving.server.TritonServer`: free
   ports chosen on the node, the fleet's binding and TLS, CPU or GPU, a node-local work folder);
3. once every model is ready, registers the server in ``servers/NNNN.json`` (address, models, health) and
   rewrites that entry every ``heartbeat_s`` while the server is live and ready (:class:`Heartbeat`: a write
   that fails does not stop a healthy server; it keeps serving and retrying, and leaves only after
   ``GRACE_TTLS`` TTLs without a write); before registering and at every heartbeat it serves the model versions
   the fleet's records ask for (:class:`~.fleet_rollout.Reconciler`: rolling updates);
4. leaves when asked (``jobs/NNNN/stop`` or the fleet's ``stop`` file), on SIGTERM/SIGINT (``scancel``, a
   wall-time limit, ``condor_rm``), or when its server dies: it removes its entry first, waits ``drain_s``
   so clients stop choosing it and until its server is quiet (requests already sent are answered), then
   stops the server within a bound, its work folder removed (:mod:`.fleet_drain`).

Exit status: 0 stopped as asked (reported ``done``), 1 the server could not start or died (``failed``),
143/130 stopped by SIGTERM/SIGINT (reported ``failed`` with that reason, as for a client job); a signal while
the server starts is acted on once it is ready (it then leaves at once, without registering).
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from ...framework.errors import InferenceError, SonicError
from ...framework.inference.serving import Entry, deregister, register
from ...framework.inference.serving import TritonServer, available_cards, host_port, share_of, shared_note
from .fleet_drain import drain_and_stop
from .fleet_prometheus import metrics_address
from .fleet import STOP_FILE, Fleet, FleetSpec
from .fleet_rollout import Reconciler
from .job import redirect_output, batch_id_from_environment
from .records import JobReport, Submission

log = logging.getLogger(__name__)

EXIT_STOPPED, EXIT_FAILED = 0, 1
#: how long (in TTLs) a server whose entry cannot be written keeps serving and retrying before it leaves: its
#: entry expires after one TTL (new clients stop choosing it), the rest rides out a shared filesystem that
#: is briefly unwritable (a failover, a full quota) without tearing down a healthy server and starting
#: replacements that cannot register either
GRACE_TTLS = 3.0


class Heartbeat:
    """Writes one server's entry on every :meth:`beat` and decides when a server that cannot must leave.

    A failed write is warned about (naming the directory and the error) and retried at the next beat;
    the server keeps serving meanwhile. A write that succeeds again advertises the server again. Only
    after ``grace_s`` of failed writes in a row does :meth:`beat` say the server must leave.

    Args:
        directory: the fleet directory.
        entry: the server's entry (its ``health`` may change between beats).
        grace_s: how long writes may fail in a row before the server leaves.
        clock: seconds, monotonic (tests pass a fake one).
        write: what writes the entry (:func:`register`; tests pass one that fails).
    """

    def __init__(self, directory: Path, entry: Entry, grace_s: float, clock: Callable[[], float] = time.monotonic,
                 write: Callable[[Path, Entry], object] = register):
        self.directory, self.entry, self.grace_s = directory, entry, grace_s
        self.clock, self.write = clock, write
        self.written = False  # at least once
        self.failing_since: float | None = None
        self.last_error = ""

    def beat(self) -> str:
        """Writes the entry once; returns "" while the server may stay, else why it must leave."""
        now = self.clock()
        try:
            self.write(self.directory, self.entry)
        except (OSError, SonicError) as err:
            error = str(err).splitlines()[0] if str(err) else type(err).__name__
            if self.failing_since is None:
                self.failing_since = now
            failing = now - self.failing_since
            if failing >= self.grace_s:
                return (f"cannot write its entry in {self.directory} for {failing:.0f} s (limit {self.grace_s:.0f} s): "
                        f"{error}")
            if error != self.last_error:
                log.warning("cannot write its entry in %s: %s; the server keeps serving and retries every "
                            "heartbeat, for up to %.0f s before it leaves", self.directory, error, self.grace_s)
            self.last_error = error
            return ""
        if self.failing_since is not None:
            log.warning("wrote its entry in %s again after %.0f s without: the server is advertised again",
                        self.directory, now - self.failing_since)
        self.written, self.failing_since, self.last_error = True, None, ""
        return ""


def ready_models(server: TritonServer) -> dict[str, str]:
    """``{model: version}`` of the models the server says are ready (its HTTP repository index, on loopback)."""
    request = urllib.request.Request(f"http://{server.http_url}/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        index = json.loads(response.read())
    return {m["name"]: str(m.get("version", "")) for m in index if m.get("state") == "READY"}


def member_options(spec: FleetSpec, index: int, environ: Mapping[str, str] | None = None) -> FleetSpec:
    """The options of server job ``index``: the fleet's, and on the local executor with ``gpus_per_server`` (and
    no ``gpus`` chosen) the job's own slice of this node's cards, so that each server owns its cards (one per
    card with 1). A batch system gives each job its cards (its CUDA_VISIBLE_DEVICES), which the server keeps."""
    if spec.executor != "local" or not spec.gpus_per_server or spec.gpus is not None:
        return spec
    cards = available_cards(environ)
    if not cards:
        log.warning("server job %d: no GPU found to place it on (no CUDA_VISIBLE_DEVICES, no nvidia-smi); it "
                    "uses every card it sees", index)
        return spec
    note = shared_note(index + 1, spec.gpus_per_server, cards)
    if note:
        log.warning("server job %d: %s", index, note)
    return replace(spec, gpus=share_of(index, spec.gpus_per_server, list(range(len(cards)))))


def serve(directory: str | Path, index: int) -> int:
    """Runs server job ``index`` of the fleet at ``directory`` until it is asked to leave; returns the exit status."""
    fleet = Fleet(directory)
    spec, files = fleet.spec, fleet.task.files(index)
    name = f"{index:04d}"
    submission = Submission.load(files.submission)
    report = JobReport(attempt=submission.attempt if submission else 1, state="running",
                       batch_id=batch_id_from_environment(), started=time.time())
    redirect_output(files.log, f"attempt {report.attempt} of server job {index} on {report.host} pid {report.pid} "
                                f"batch id {report.batch_id} at {time.strftime('%Y-%m-%d %H:%M:%S')}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    report.save(files.report)

    def finish(state: str, code: int, reason: str) -> int:
        replace(report, state=state, ended=time.time(), exit_code=code, reason=reason).save(files.report)
        print(f"server job {index}: {state}: {reason}", flush=True)
        return code

    signalled: list[int] = []
    wake = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        signalled.append(signum)
        wake.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)

    def asked() -> str:
        if signalled:
            return signal.Signals(signalled[0]).name
        if (fleet.directory / STOP_FILE).exists():
            return "the fleet is stopping"
        if (files.directory / STOP_FILE).exists():
            return "asked to leave (autoscaler or operator)"
        return ""

    if asked():
        return finish("done", EXIT_STOPPED, f"stopped before its server started: {asked()}")
    server = TritonServer(spec.repository, member_options(spec, index))  # the fleet's spec is the servers' options
    try:
        server.start()
    except (InferenceError, OSError) as err:
        return finish("failed", EXIT_FAILED, f"the Triton server did not start: {str(err).splitlines()[0]}")
    versions = Reconciler(fleet.directory, server, grace_s=spec.ttl_s)  # rolling updates (fleet_rollout.py)
    versions.step()  # before it registers: a server that joins mid-roll serves what the others serve
    entry = Entry(name=name, address=host_port(spec.advertised_host(), server.ports["grpc"]),
                  models=ready_models(server), versions=versions.versions(), ssl=bool(spec.tls_cert),
                  root_certificates=spec.client_root_certificates,
                  batch_id=report.batch_id, ttl_s=spec.ttl_s, gpus=server.gpu_cards,
                  metrics=metrics_address(spec, server))  # the fleet's Prometheus scrapes it (fleet_prometheus)
    heartbeat = Heartbeat(fleet.directory, entry, GRACE_TTLS * spec.ttl_s)
    why, broken = "", False
    try:
        while not (why := asked()):
            if not server.alive():
                why = f"its Triton server exited (code {server.process.returncode}); log:\n{server.log_tail(10)}"
                break
            if versions.step_soon():  # loads run beside the heartbeat: a long one must not let the entry expire
                entry.models = ready_models(server)
            entry.versions, entry.version_errors = versions.versions(), versions.problems()
            entry.health = "ready" if versions.ready() else "not ready"
            first = not heartbeat.written
            why = heartbeat.beat()
            if why:  # a shared filesystem unwritable for long: clients cannot see it, it serves nobody new
                broken = True
                break
            if first and heartbeat.written:
                print(f"server job {index}: registered {entry.address} serving {sorted(entry.models)}", flush=True)
            wake.wait(spec.heartbeat_s)
    finally:
        try:
            deregister(fleet.directory, name)  # first: clients stop choosing it before it stops answering
        except OSError as err:
            print(f"server job {index}: cannot remove its entry ({err}); it expires in {spec.ttl_s:.0f} s", flush=True)
    if server.alive():
        print(f"server job {index}: leaving ({why}); draining {spec.drain_s:.0f} s", flush=True)
        drain_and_stop(server, spec.drain_s, spec.stop_timeout_s, files.directory,  # fleet_drain.py
                       say=lambda line: print(f"server job {index}: {line}", flush=True))
        if signalled:
            signum = signalled[0]
            return finish("failed", 128 + signum, f"terminated by {signal.Signals(signum).name} "
                                                  f"(batch system stop or time limit); server stopped cleanly")
        if broken:
            return finish("failed", EXIT_FAILED, why)
        return finish("done", EXIT_STOPPED, f"stopped: {why}")
    server.stop()
    return finish("failed", EXIT_FAILED, why)
