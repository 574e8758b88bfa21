"""``sonic plan``: how many CPU jobs one inference server can feed, and how many a network link can carry.

The seeds' two arguments, as arithmetic on this project's own measurements:

* **jobs per GPU** — a job that offloads its inference spends ``t_other`` seconds per event on
  everything else, so it asks for ``1 / t_other`` events of inference per second; a server needs
  ``t_server`` seconds of compute per event. One server keeps up with
  ``N = t_other / t_server × target utilisation`` jobs (ProtoDUNE: ~110 s of non-ML work against
  ~1.6 s of GPU time per event gives the quoted 68:1).
* **job cap for a link** — each job then sends and receives ``B`` bytes per event at ``1 / t_other``
  events per second; a link of ``L`` bytes/s stays below its target utilisation ``u`` with at most
  ``J = u × L × t_other / B`` jobs running (the ~600-job cap of the ProtoDUNE test on 100 Gb/s).

Where the numbers come from (each can also be given by hand, and the report says which was used):

* ``t_other``: timing reports (``sonic run --timing-json``, or a task's job reports): the job's time
  per event *not spent waiting on inference*, for direct and SONIC runs alike (the ProtoDUNE way: 330 s
  per event, of which 220 s inference, leaves 110 s): the wall time minus the external modules' wait,
  or the module time per thread if that is larger (with several streams the waits overlap other
  streams' work, and wall − wait would undercount). A SONIC job's wall time would count the wait on a
  loaded server as "other" work, and so overstate how many jobs a server feeds;
* ``t_server``: the server-side compute time per event that Triton reports for a SONIC run
  (its statistics are in the timing report), or the wait on inference per event of a one-stream run
  with *direct* inference on the server's device (``--server-timing``), or ``--server-ms-per-event``;
* ``B``: the inference service's byte counters when its report has them (``bytes_sent`` +
  ``bytes_received`` per model); else the measured rows (batch entries) per event times each
  model's bytes per row from its repository entry (``--repository``, fixed shapes only); else
  ``--bytes-per-event``.

The **knee** is where the time per event starts to rise: where the flat line (one job alone) meets the
saturated one (N jobs over the most events per second anything lets through), the same construction
the scale benchmark applies to a measured curve. One job alone takes ``T_1 = t_other + t_ml`` per event
(``t_ml``: its wait on inference with the server to itself, the server time if not measured). Three
things cap the events per second of N jobs:

* **the server**: ``servers / t_server`` (``t_server``: compute per event per instance);
* **the host**, where the jobs share ``cores`` CPU cores (a test machine, or a grid node running several
  jobs; a CPU server on the same node shares them too): ``cores / c_host``, with ``c_host`` the CPU
  time one event costs that host — the job's own CPU per event (its whole process: modules,
  framework, the client's serialisation and gRPC threads, all in its process time; not its wall
  time, which counts sleeps and waits) plus, for a server on the same cores, the server's CPU per
  event;
* **the link** the jobs share to reach the servers: ``L / B`` events per second, ``B`` the bytes per event
  in its busier direction (a link carries each way apart): the knee at ``T_1 × L / B`` jobs (``bound`` =
  "link"; the papers' ~600 jobs on 100 Gb/s is this bound at a target utilisation).

A job a link away from servers whose latency was measured close to them (``rtt_s``) also waits, per event,
its bytes ÷ the rate and its round trips (:func:`time_per_event_over_link`, which also says what events in
flight hide of them); ``T_1`` includes that.

So the time per event is ``max(T_1, N × t_server / servers, N × c_host / cores)``
(:func:`predicted_time_per_event`; the link's term ``N × B / L``) and the knee lies at ``N = T_1 × min(servers / t_server,
cores / c_host)``: ``T_1 / t_server`` jobs per server when the server saturates first (``bound`` =
"server"), ``T_1 × cores / c_host`` jobs on the host when its cores do ("host"). The host's inputs are
measured with one job (a GPU's compute per event is not: idle between one job's events it runs slower,
so the scale benchmark takes it from its loaded points). ``c_host`` grows little under load
(the scale benchmark in docs/benchmarks.md: on 2 idle cores between 17 % less and 4 % more than the one-job
figure at every N; on one core up to ~25 % more just past the knee), but the cores are only those
*free* for this work: other processes on the host take their share (the scale benchmark reports it
per point). Queues, batching and a link past this arithmetic are what ``simulate.py`` is for.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...framework.inference.sonic import compute_ns
from .errors import GridError

BYTE_KEYS = (("bytes_sent", "bytes_received"), ("input_bytes", "output_bytes"), ("bytes_in", "bytes_out"))


@dataclass(frozen=True)
class Measurement:
    """Per-event figures of one or more runs of the same workflow.

    Args:
        events: events measured (all runs together).
        wall_s_per_event: a job's wall time per event (its streams and threads as configured).
        cpu_s_per_event: CPU time per event of the whole process (all its threads), after its first event
            where the report says (``after_first_event``: start-up left out, as a long job amortises it).
        wait_s_per_event: time events waited on inference results (external modules).
        inference_s_per_event: time in inference calls per event (the client's counters; calls in flight
            together each count, so this exceeds the wait when requests overlap).
        other_s_per_event: a job's time per event with inference offloaded (see the module docstring).
        bytes_per_event: bytes sent + received per event by the inference client, when counted.
        server_s_per_event: server compute per event (Triton's statistics of a SONIC run), when reported.
        rows_per_event: batch entries sent per event, per model.
        requests_per_event: requests sent per event, per model (after splitting at max_batch_size).
        sent_fraction: bytes sent / (sent + received), when the clients counted both.
        steady_wall_s_per_event: wall time per event after the first (``after_first_event``; all events
            where a report does not mark it): a one-stream job's time per event, start-up left out.
        mode: inference mode of the runs (direct, sonic, mixed, or None without inference).
        sources: the reports these came from.
    """

    events: int
    wall_s_per_event: float
    cpu_s_per_event: float
    wait_s_per_event: float
    inference_s_per_event: float
    other_s_per_event: float
    bytes_per_event: float | None = None
    server_s_per_event: float | None = None
    rows_per_event: dict[str, float] = field(default_factory=dict)
    requests_per_event: dict[str, float] = field(default_factory=dict)
    sent_fraction: float | None = None
    steady_wall_s_per_event: float | None = None
    mode: str | None = None
    sources: tuple[str, ...] = ()


def _bytes(inference: Any) -> tuple[float, float] | None:
    """(sent, received) bytes of one report's inference section, None when its client counted none."""
    if not isinstance(inference, dict):
        return None
    sent_total, received_total, found = 0.0, 0.0, False
    for model in (inference.get("models") or {}).values():
        for sent, received in BYTE_KEYS:
            if sent in model or received in model:
                sent_total += float(model.get(sent, 0))
                received_total += float(model.get(received, 0))
                found = True
                break
    return (sent_total, received_total) if found else None


def _server_seconds(inference: Any) -> float | None:
    """Triton's compute time (input + infer + output) summed over the servers and models of one run."""
    if not isinstance(inference, dict) or not isinstance(inference.get("servers"), dict):
        return None
    total = sum(compute_ns(stats) for models in inference["servers"].values() for stats in models.values())
    return total / 1e9 if total else None


def row_bytes(model: Any) -> int | None:
    """Bytes of one batch entry in and out of a model (None when a dimension is variable).

    Every output is counted: an upper bound when a producer asks for fewer.
    """
    total = 0
    for spec in [*model.inputs, *model.outputs]:
        if any(d < 0 for d in spec.dims):
            return None
        total += int(np.prod(spec.dims, dtype=np.int64)) * spec.dtype.itemsize
    return total


def bytes_from_repository(rows_per_event: dict[str, float], repositories: list[str]) -> tuple[float | None, list[str]]:
    """Bytes per event from the measured rows per event and each model's tensor shapes."""
    from ...framework.inference import ModelRepository

    repository = ModelRepository(repositories)
    total, notes = 0.0, []
    for name, rows in rows_per_event.items():
        size = row_bytes(repository.get(name))
        if size is None:
            notes.append(f"model {name!r} has variable dimensions: give --bytes-per-event")
            return None, notes
        total += rows * size
    return (total or None), notes


def other_seconds(wall: float, wait: float, module_s: float, threads: int = 1) -> float:
    """A job's time not spent waiting on inference: wall − wait (exact with one stream), or its module
    time spread over its threads where that is larger (several streams' waits overlap other work)."""
    return max(wall - wait, module_s / max(1, threads), 0.0)


def measure(paths: list[str | Path]) -> Measurement:
    """Reads timing reports (JSON files, or task directories: their done jobs' ``timing.json``).

    Raises:
        GridError: naming a path that holds no usable report.
    """
    reports: list[tuple[str, dict[str, Any]]] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(path.glob("jobs/*/timing.json"))
            done = [p for p in found if json.loads((p.parent / "state.json").read_text()).get("state") == "done"] \
                if found else []
            if not done:
                raise GridError(f"{path} has no done job with a timing report (is it a task directory?)")
            reports += [(str(p), json.loads(p.read_text())) for p in done]
        else:
            try:
                reports.append((str(path), json.loads(path.read_text())))
            except (OSError, json.JSONDecodeError) as err:
                raise GridError(f"cannot read timing report {path}: {err}") from None
    totals = dict.fromkeys(("events", "wall", "cpu", "wait", "inference", "other"), 0.0)
    cpu_events = 0.0  # events the CPU total covers (all but the first of reports that mark it)
    steady_wall = 0.0
    total_bytes: float | None = 0.0
    sent_bytes = 0.0
    server: float | None = 0.0
    rows: dict[str, float] = {}
    requests: dict[str, float] = {}
    modes = set()
    for name, rep in reports:
        n = int(rep.get("events", 0))
        if n <= 0 or "wall_s" not in rep:
            raise GridError(f"{name} is not a timing report of a run that processed events")
        inference = rep.get("inference") if isinstance(rep.get("inference"), dict) else {}
        models = inference.get("models") or {}
        wall, cpu = float(rep["wall_s"]), float(rep.get("cpu_s", 0.0))
        steady = rep.get("after_first_event") if isinstance(rep.get("after_first_event"), dict) else {}
        if int(steady.get("events", 0)) > 0:
            totals["cpu"] += float(steady["cpu_s"])
            steady_wall += float(steady["wall_s"])
            cpu_events += int(steady["events"])
        else:
            totals["cpu"] += cpu
            steady_wall += wall
            cpu_events += n
        wait = sum(float(m.get("wait_ms_per_event", 0.0)) * n / 1000 for m in rep.get("modules", [])
                   if m.get("kind") == "external")
        in_calls = sum(float(c.get("seconds", 0.0)) for c in models.values())
        module_s = sum(float(m.get("wall_ms_per_event", 0.0)) * n / 1000 for m in rep.get("modules", []))
        other = other_seconds(wall, wait, module_s, int(rep.get("threads") or 1))
        for key, value in (("events", n), ("wall", wall), ("wait", wait), ("inference", in_calls), ("other", other)):
            totals[key] += value
        counted = _bytes(inference)
        total_bytes = None if counted is None or total_bytes is None else total_bytes + sum(counted)
        sent_bytes += counted[0] if counted else 0.0
        seconds = _server_seconds(inference)
        server = None if seconds is None or server is None else server + seconds
        for model, counters in models.items():
            rows[model] = rows.get(model, 0.0) + float(counters.get("rows", 0))
            requests[model] = requests.get(model, 0.0) + float(counters.get("requests", 0))
        modes.add(inference.get("mode"))
    modes.discard(None)
    events = totals["events"]
    return Measurement(events=int(events), wall_s_per_event=totals["wall"] / events,
                       cpu_s_per_event=totals["cpu"] / cpu_events, wait_s_per_event=totals["wait"] / events,
                       inference_s_per_event=totals["inference"] / events, other_s_per_event=totals["other"] / events,
                       bytes_per_event=None if not total_bytes else total_bytes / events,
                       sent_fraction=None if not total_bytes else sent_bytes / total_bytes,
                       steady_wall_s_per_event=steady_wall / cpu_events,
                       server_s_per_event=None if not server else server / events,
                       rows_per_event={model: n / events for model, n in rows.items()},
                       requests_per_event={model: n / events for model, n in requests.items()},
                       mode=modes.pop() if len(modes) == 1 else ("mixed" if modes else None),
                       sources=tuple(name for name, _ in reports))


@dataclass
class Plan:
    """The result, with every input it used."""

    other_s_per_event: float
    server_s_per_event: float | None
    bytes_per_event: float | None
    link_gbps: float
    link_utilisation: float
    server_utilisation: float
    latency_s_per_event: float | None = None
    jobs_per_server: float | None = None
    jobs_per_server_at_target: float | None = None
    knee_jobs_per_server: float | None = None
    bytes_per_s_per_job: float | None = None
    link_job_cap: int | None = None
    servers_for_link_cap: int | None = None
    cores: float | None = None
    host_cpu_s_per_event: float | None = None
    host_knee_jobs: float | None = None
    link_knee_jobs: float | None = None
    link_s_per_event: float | None = None
    time_alone_s_per_event: float | None = None
    knee_jobs: float | None = None
    bound: str | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan(other_s_per_event: float, server_s_per_event: float | None, bytes_per_event: float | None,
         link_gbps: float = 100.0, link_utilisation: float = 0.8, server_utilisation: float = 1.0,
         latency_s_per_event: float | None = None, cores: float | None = None,
         host_cpu_s_per_event: float | None = None, sent_fraction: float | None = None,
         rtt_s: float | None = None, round_trips: float = 1.0) -> Plan:
    """The two numbers from per-event times and bytes, and the knee with the bound that sets it (see the
    module docstring for the formulas).

    Args:
        latency_s_per_event: a job's wait on inference per event with the server to itself (for the
            knee; the server time when not given).
        cores: CPU cores the jobs share (with a CPU server on them, if any); None: each job has its own, as
            on a grid node per job, and only the server bounds.
        host_cpu_s_per_event: CPU time one event costs those cores: the job's CPU per event, plus the
            server's when it computes on the same cores.
        sent_fraction: the share of the bytes per event that jobs send (None: all, the busiest case); a link
            carries each direction apart, so the busier one bounds it.
        rtt_s: plan for jobs a link away from the servers whose latency was measured close to them: a job alone
            then also waits the bytes ÷ the link's rate and ``round_trips`` round trips per event
            (:func:`time_per_event_over_link`). None: the latency as measured.

    Example::

        plan(110.0, 1.6, None).jobs_per_server   # 68.75: ProtoDUNE's 68:1
        plan(0.050, 0.005, None, latency_s_per_event=0.012, cores=2, host_cpu_s_per_event=0.016).bound  # "host"
    """
    if other_s_per_event <= 0:
        raise GridError("the time per event outside inference must be positive")
    for name, value in (("cores", cores), ("host CPU per event", host_cpu_s_per_event)):
        if value is not None and value <= 0:
            raise GridError(f"plan: {name} must be positive, not {value}")
    result = Plan(other_s_per_event, server_s_per_event, bytes_per_event, link_gbps, link_utilisation,
                  server_utilisation, cores=cores, host_cpu_s_per_event=host_cpu_s_per_event)
    latency = server_s_per_event if latency_s_per_event is None else latency_s_per_event
    alone = other_s_per_event + (latency or 0.0)
    link_bytes = link_gbps * 1e9 / 8
    if rtt_s is not None:
        result.link_s_per_event = time_per_event_over_link(0.0, bytes_per_event or 0.0, 0.0, link_gbps * 1000, rtt_s,
                                                           round_trips)
        alone += result.link_s_per_event
    result.time_alone_s_per_event = alone
    if server_s_per_event:
        result.latency_s_per_event = latency
        result.jobs_per_server = other_s_per_event / server_s_per_event
        result.jobs_per_server_at_target = result.jobs_per_server * server_utilisation
        result.knee_jobs_per_server = alone / server_s_per_event
    else:
        result.notes.append("no server time per event: give --server-timing or --server-ms-per-event")
    if cores and host_cpu_s_per_event:
        result.host_knee_jobs = alone * cores / host_cpu_s_per_event
        result.notes.append(f"the host bound counts {cores:g} cores free for these jobs: other processes' load on "
                            f"them lowers it in proportion")
    if bytes_per_event and link_gbps:
        busiest = bytes_per_event * (1.0 if sent_fraction is None else max(sent_fraction, 1 - sent_fraction))
        result.link_knee_jobs = alone * link_bytes / busiest
    knees = {bound: knee for bound, knee in (("server", result.knee_jobs_per_server), ("host", result.host_knee_jobs),
                                             ("link", result.link_knee_jobs)) if knee is not None}
    if knees:
        result.bound = min(knees, key=knees.__getitem__)
        result.knee_jobs = knees[result.bound]
    if bytes_per_event:
        result.bytes_per_s_per_job = bytes_per_event / other_s_per_event
        result.link_job_cap = math.floor(link_utilisation * link_bytes / result.bytes_per_s_per_job)
        if result.jobs_per_server_at_target:
            result.servers_for_link_cap = math.ceil(result.link_job_cap / result.jobs_per_server_at_target)
    else:
        result.notes.append("no bytes per event: give --bytes-per-event (or run with an inference client "
                            "that counts bytes)")
    return result


def time_per_event_over_link(local_s: float, bytes_sent: float, bytes_received: float, rate_mbit: float,
                             rtt_s: float, round_trips: float = 1.0, in_flight: float = 1.0,
                             alone_s: float | None = None, requests: float = 1.0, server_s: float = 0.0) -> float:
    """A job's time per event when its inference crosses a link: each event's requests and answers cross it
    (bytes ÷ rate) and it waits ``round_trips`` round trips; with ``in_flight`` events at a time (streams ×
    events per call) those waits overlap one another and the job's own work.

    An event's (or a batch's) ``requests`` are sent together and cross the link one after the other, and the
    server computes each as soon as it has arrived: while one is computed the next is on the wire. So the
    upload adds ``max(up ÷ k + c, up + c ÷ k) − c`` to the time with the servers close (``up``: the sent bytes'
    time on the link, ``c``: the server's compute ``server_s``, ``k`` requests): all of ``up`` for one request,
    less as the computing hides the wire.

    The time per event is then the largest of: the job's time per event with the servers close (``local_s``:
    its own work, the servers' and what overlap it already had), one event's whole time (``alone_s`` + that +
    the answers' time + round trips × RTT) shared by the events in flight, and the busier direction's bytes ÷
    rate (a link carries each way apart, one event at a time at most its rate).

    Args:
        local_s: the job's time per event measured close to the servers.
        bytes_sent, bytes_received: per event.
        rate_mbit: the link's rate (0: not limited).
        rtt_s: its round trip.
        round_trips: round trips one event waits in turn (with batches: per event, a batch's divided by
            its events): requests sent together wait one.
        in_flight: streams whose events overlap (one batch each).
        alone_s: one event's time with the servers close, in flight alone (default: ``local_s``).
        requests: requests one event (or batch) sends together (1: the whole upload before any compute).
        server_s: the server's compute per event (0: unknown, no overlap counted).

    Example::

        time_per_event_over_link(0.45, 3.0e6, 0.04e6, 100, 0.05)   # 0.45 + 3.04e6 × 8 / 1e8 + 0.05 = 0.743
    """
    rate = rate_mbit * 1e6 / 8
    up = bytes_sent / rate if rate else 0.0
    down = bytes_received / rate if rate else 0.0
    k, c = max(1.0, requests), server_s
    upload = max(up / k + c, up + c / k) - c
    alone = (local_s if alone_s is None else alone_s) + upload + down + round_trips * rtt_s
    return max(local_s, alone / max(1.0, in_flight), max(up, down))


def predicted_time_per_event(jobs: float | np.ndarray, other_s: float, latency_s: float, server_s: float,
                             servers: int = 1, host_cpu_s: float = 0.0, cores: float = 0.0) -> float | np.ndarray:
    """A job's time per event with ``jobs`` jobs on ``servers`` servers, deterministic times: flat at
    ``other + latency`` until the servers saturate (``jobs × server_s / servers``) or the host's ``cores``
    do (``jobs × host_cpu_s / cores``), whichever comes first (the knee)."""
    n = np.asarray(jobs, dtype=float)
    host = n * host_cpu_s / cores if cores and host_cpu_s else 0.0
    return np.maximum(np.maximum(other_s + latency_s, n * server_s / max(1, servers)), host)


def report(result: Plan, job: Measurement | None = None, server: Measurement | None = None,
           sources: dict[str, str] | None = None) -> str:
    """The plan as text: the inputs and where each came from, then the arithmetic."""
    sources = sources or {}

    def source(key: str) -> str:
        return f"   [{sources[key]}]" if key in sources else ""

    lines = ["inputs:"]
    if job:
        lines.append(f"  job runs: {job.events} events from {len(job.sources)} report(s), inference {job.mode}: "
                     f"wall {1000 * job.wall_s_per_event:.3f} ms/event, CPU {1000 * job.cpu_s_per_event:.3f} "
                     f"ms/event, wait on inference {1000 * job.wait_s_per_event:.3f} ms/event")
    if server:
        lines.append(f"  server runs: {server.events} events, inference {server.mode}: wait on inference "
                     f"{1000 * server.wait_s_per_event:.3f} ms/event")
    lines.append(f"  t_other  = {1000 * result.other_s_per_event:.3f} ms/event{source('t_other')}")
    if result.server_s_per_event:
        lines.append(f"  t_server = {1000 * result.server_s_per_event:.3f} ms/event{source('t_server')}")
    if result.bytes_per_event:
        lines.append(f"  B        = {result.bytes_per_event / 1e6:.4f} MB/event{source('B')}")
    lines.append(f"  link     = {result.link_gbps:g} Gb/s, at most {100 * result.link_utilisation:.0f}% used")
    lines.append("results:")
    if result.jobs_per_server:
        lines.append(f"  jobs per server = t_other / t_server = {result.jobs_per_server:.1f} : 1"
                     + (f"  ({result.jobs_per_server_at_target:.1f} at {100 * result.server_utilisation:.0f}% "
                        f"server utilisation)" if result.server_utilisation != 1.0 else ""))
        lines.append(f"  server knee = (t_other + t_ml) / t_server = {result.knee_jobs_per_server:.1f} jobs per server "
                     f"(t_ml = {1000 * result.latency_s_per_event:.3f} ms/event: a job's wait with the server to itself)")
    if result.host_knee_jobs is not None:
        lines.append(f"  host knee = (t_other + t_ml) x cores / c_host = {result.host_knee_jobs:.1f} jobs on the host "
                     f"({result.cores:g} cores, c_host = {1000 * result.host_cpu_s_per_event:.3f} ms of CPU per event)"
                     f"{source('c_host')}")
    if result.link_knee_jobs is not None:
        lines.append(f"  link knee = (t_other + t_ml) x L / B (busier direction) = {result.link_knee_jobs:.1f} jobs "
                     f"on one {result.link_gbps:g} Gb/s link")
    if result.link_s_per_event is not None:
        lines.append(f"  over the link: B / L + round trips x RTT = {1000 * result.link_s_per_event:.3f} ms/event more; "
                     f"a job alone takes {1000 * result.time_alone_s_per_event:.3f} ms/event")
    if result.bound:
        where = {"server": "jobs per server", "host": "jobs on the host", "link": "jobs on the link"}[result.bound]
        lines.append(f"  knee at {result.knee_jobs:.1f} {where}: the {result.bound} saturates first")
    if result.link_job_cap is not None:
        lines.append(f"  per job: B / t_other = {result.bytes_per_s_per_job / 1e6:.3f} MB/s")
        lines.append(f"  job cap for the link = u x L / (B / t_other) = {result.link_job_cap} jobs"
                     + (f" (needing {result.servers_for_link_cap} servers)" if result.servers_for_link_cap else ""))
    lines += [f"  note: {n}" for n in result.notes]
    return "\n".join(lines)
