"""``sonic plan --simulate``: J client jobs, S inference servers and a network link, as a discrete-event
simulation, to carry a measured task past the number of jobs one machine can run.

Why a simulation and not only the planner's arithmetic: the arithmetic gives the asymptotes (a job alone,
a saturated server); the queues between them, dynamic batching, several instances, a link shared by
every request and the spread of service times decide where exactly the knee bends, and how evenly a
fleet of servers is loaded. This is plain Python on :mod:`heapq` (no dependency), deterministic for a
given seed.

The model (each piece taken from a measured task, see :func:`from_measurement`):

* **job**: one stream; per event ``t_other`` of non-inference work, then ``requests`` requests sent
  together (the producers' requests of one event), each of ``bytes_sent`` / ``bytes_received``;
  the next event starts when every answer is back (a job's time per event is other + wait).
* **link**: requests and answers cross one shared link of ``link_gbps`` each way, first come first
  served (a request's transfer starts when the link is free: serialisation, not packet sharing), and
  each crossing takes half the round trip ``rtt_s`` more (the link's length, which any number of requests
  share); ``link_gbps=None`` or 0 leaves the rate out.
* **server**: ``instances`` executions at a time; requests queue in arrival order; with dynamic
  batching an idle instance takes up to ``max_batch`` queued requests, waiting up to ``queue_delay_s``
  for more when fewer are queued; an execution of ``b`` requests takes
  ``service × (fixed + (1 − fixed) × b)`` (``fixed``: the share of a request's time a batch pays once),
  ``service`` drawn from a gamma distribution of the measured mean and coefficient of variation
  (``cv=0``: deterministic).
* **balancing**: each job sends a request to the server whose queue (waiting + executing) is shortest,
  ties taken in turn, as the client's server pool does with servers of equal queue time.
* **host cores** (``cores``): jobs that share a host's cores (a test machine, a grid node running several
  jobs) hold them for ``cpu_s`` of each event's ``other_s``; with ``server_on_cores`` a CPU server on the
  same host executes on them too. Runnable work shares the cores equally (processor sharing, as the
  operating system time-slices runnable processes): a core each while there are fewer than ``cores``,
  else ``cores / n`` each. So the host saturates at ``cores / (cpu_s + a server's CPU per event)``
  events/s, the planner's host bound.

Example::

    result = simulate(Scenario(jobs=68, servers=1, other_s=110.0, service_s=1.6, requests=1))
    result.time_per_event_median   # ~112 s: below the knee (68 < (110 + 1.6) / 1.6 ≈ 70)
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .errors import GridError


@dataclass(frozen=True)
class Scenario:
    """One simulated configuration.

    Args:
        jobs: client jobs (one stream each).
        servers: inference servers.
        other_s: a job's time per event not spent on inference (mean).
        service_s: server time per request (mean; one request executed alone).
        overhead_s: per event, time a job waits on inference beyond the server's time (client, transport,
            framework: a one-job run's wait minus the server's compute), added to its non-inference time.
        requests: requests per event (sent together, all awaited).
        bytes_sent, bytes_received: per request.
        link_gbps: link bandwidth each way (None or 0: no link).
        rtt_s: the link's round trip (half on each crossing).
        instances: executions at a time per server.
        max_batch: requests per execution (1: no dynamic batching).
        queue_delay_s: how long an idle instance waits for a fuller batch.
        fixed: share of a request's service time an execution pays once whatever its batch.
        service_cv, other_cv: coefficients of variation (0: deterministic).
        cores, cpu_s: jobs sharing ``cores`` CPU cores (0: a core each, as on a grid), each event needing
            ``cpu_s`` of CPU in its ``other_s`` (the rest, e.g. a sleep standing for more work, needs none).
        cpu_cv: coefficient of variation of ``cpu_s`` (0: deterministic).
        server_on_cores: the servers execute on those same cores (a CPU server on the jobs' host): an
            execution is ``service_s`` of CPU work there.
        events: events per job simulated (the first ``warmup`` of each job are not counted).
        stagger: start the jobs at random times within one cycle (else all at once, in lock-step).
        seed: random seed.
    """

    jobs: int
    servers: int = 1
    other_s: float = 1.0
    service_s: float = 0.1
    overhead_s: float = 0.0
    requests: int = 1
    bytes_sent: float = 0.0
    bytes_received: float = 0.0
    link_gbps: float | None = None
    rtt_s: float = 0.0
    instances: int = 1
    max_batch: int = 1
    queue_delay_s: float = 0.0
    fixed: float = 0.0
    service_cv: float = 0.0
    other_cv: float = 0.0
    cores: int = 0
    cpu_s: float = 0.0
    cpu_cv: float = 0.0
    server_on_cores: bool = False
    events: int = 50
    warmup: int = 2
    stagger: bool = True
    seed: int = 1

    def check(self) -> None:
        """Raises GridError naming the first impossible setting."""
        for name in ("jobs", "servers", "requests", "instances", "max_batch", "events"):
            if getattr(self, name) < 1:
                raise GridError(f"simulation: {name} must be at least 1, not {getattr(self, name)}")
        for name in ("other_s", "service_s", "overhead_s", "cpu_s", "cores", "bytes_sent", "bytes_received", "queue_delay_s", "service_cv", "other_cv", "cpu_cv", "rtt_s"):
            if getattr(self, name) < 0:
                raise GridError(f"simulation: {name} must not be negative, not {getattr(self, name)}")
        if not 0 <= self.fixed <= 1:
            raise GridError(f"simulation: fixed must be between 0 and 1, not {self.fixed}")
        if self.warmup >= self.events:
            raise GridError(f"simulation: events ({self.events}) must exceed warmup ({self.warmup})")


@dataclass
class Result:
    """What a simulation measured (times in seconds)."""

    scenario: dict[str, Any]
    time_per_event_median: float
    time_per_event_p90: float
    events_per_s: float
    server_utilisation: list[float]
    server_share: list[float]
    queue_s_per_request: float
    link_utilisation: float | None
    peak_link_bytes_per_s: float | None
    knee_jobs: float
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _draw(rng: np.random.Generator, mean: float, cv: float) -> float:
    """A gamma-distributed time of this mean and coefficient of variation (the mean itself when cv=0)."""
    if cv <= 0 or mean <= 0:
        return mean
    shape = 1.0 / (cv * cv)
    return float(rng.gamma(shape, mean / shape))


class _Server:
    def __init__(self, index: int, instances: int):
        self.index = index
        self.free = instances
        self.queue: deque[tuple[float, int]] = deque()  # (arrival, job)
        self.executing = 0
        self.in_transit = 0  # sent to it, still on the link: already part of its load
        self.busy_s = 0.0
        self.requests = 0
        self.timer_at: float | None = None  # a batch waiting for more requests until then

    @property
    def load(self) -> int:
        return len(self.queue) + self.executing + self.in_transit


class _Cores:
    """A host's cores shared equally by the runnable work (processor sharing): each of ``n`` tasks
    progresses at ``min(1, cores / n)`` of a core. Tasks carry what to do when their work is done."""

    def __init__(self, cores: int):
        self.cores = cores
        self.tasks: dict[int, list[Any]] = {}  # id → [remaining CPU seconds, payload]
        self.last = 0.0
        self.version = 0  # the completion scheduled for this version is the valid one
        self._ids = itertools.count()

    def _rate(self) -> float:
        return min(1.0, self.cores / len(self.tasks)) if self.tasks else 0.0

    def advance(self, now: float) -> None:
        """Every task's work done since the last change."""
        done = (now - self.last) * self._rate()
        for task in self.tasks.values():
            task[0] -= done
        self.last = now

    def add(self, now: float, work: float, payload: tuple) -> None:
        self.advance(now)
        self.tasks[next(self._ids)] = [work, payload]

    def finished(self, now: float) -> list[tuple]:
        """The payloads of the tasks done by ``now`` (removed)."""
        self.advance(now)
        done = [key for key, (left, _) in self.tasks.items() if left <= 1e-9]  # 1 ns: rounding, not work
        return [self.tasks.pop(key)[1] for key in done]

    def next_done(self) -> float | None:
        """When the task with the least work left finishes, if nothing changes before."""
        if not self.tasks:
            return None
        return self.last + max(0.0, min(left for left, _ in self.tasks.values())) / self._rate()


class _Link:
    """One direction of a link: transfers one after the other at ``bytes_per_s``."""

    def __init__(self, bytes_per_s: float | None):
        self.rate = bytes_per_s
        self.free_at = 0.0
        self.busy_s = 0.0
        self.transfers: list[tuple[float, float, float]] = []  # (start, end, bytes)

    def transfer(self, now: float, size: float) -> float:
        """When a transfer of ``size`` bytes asked for at ``now`` arrives."""
        if not self.rate or size <= 0:
            return now
        start = max(now, self.free_at)
        self.free_at = start + size / self.rate
        self.busy_s += size / self.rate
        self.transfers.append((start, self.free_at, size))
        return self.free_at


def simulate(s: Scenario) -> Result:
    """Runs the scenario to the end of every job's events; see the module docstring for the model."""
    s.check()
    rng = np.random.default_rng(s.seed)
    rate = s.link_gbps * 1e9 / 8 if s.link_gbps else None
    up, down = _Link(rate), _Link(rate)
    servers = [_Server(i, s.instances) for i in range(s.servers)]
    turn = itertools.count()
    seq = itertools.count()
    events: list[tuple[float, int, str, tuple]] = []

    def push(t: float, kind: str, *data: Any) -> None:
        heapq.heappush(events, (t, next(seq), kind, data))

    outstanding = [0] * s.jobs
    event_start = [0.0] * s.jobs
    done_events = [0] * s.jobs
    times: list[list[float]] = [[] for _ in range(s.jobs)]
    completions: list[list[float]] = [[] for _ in range(s.jobs)]
    queue_waits: list[float] = []

    cores = _Cores(s.cores)

    def on_cores(now: float, work: float, payload: tuple) -> None:
        """Adds CPU work to the host's cores and schedules the next completion there."""
        cores.add(now, work, payload)
        reschedule()

    def reschedule() -> None:
        cores.version += 1
        due = cores.next_done()
        if due is not None:
            push(due, "cores", cores.version)

    def start_event(job: int, now: float) -> None:
        event_start[job] = now
        if s.cores:
            cpu = _draw(rng, s.cpu_s, s.cpu_cv)
            on_cores(now, cpu, ("job", job, cpu))
        else:
            push(now + _draw(rng, s.other_s, s.other_cv) + s.overhead_s, "send", job)

    def choose() -> _Server:
        shift = next(turn) % len(servers)  # ties taken in turn: the scan starts one server further each time
        return min(servers[shift:] + servers[:shift], key=lambda server: server.load)

    def try_start(server: _Server, now: float) -> None:
        while server.free and server.queue:
            if len(server.queue) < s.max_batch and s.queue_delay_s > 0:
                due = server.queue[0][0] + s.queue_delay_s
                if now < due:
                    if server.timer_at is None or server.timer_at > due:
                        server.timer_at = due
                        push(due, "timer", server.index)
                    return
            batch = [server.queue.popleft() for _ in range(min(s.max_batch, len(server.queue)))]
            duration = _draw(rng, s.service_s, s.service_cv) * (s.fixed + (1 - s.fixed) * len(batch))
            server.free -= 1
            server.executing += len(batch)
            server.busy_s += duration
            queue_waits.extend(now - arrival for arrival, _ in batch)
            if s.cores and s.server_on_cores:  # CPU work on the host's shared cores: slower when they are busy
                on_cores(now, duration, ("executed", server.index, tuple(job for _, job in batch)))
            else:
                push(now + duration, "executed", server.index, tuple(job for _, job in batch))

    cycle = s.other_s + s.overhead_s + s.service_s * s.requests + s.rtt_s
    for job in range(s.jobs):  # jobs start spread over one cycle, as a batch system's do, not in lock-step
        start_event(job, float(rng.uniform(0.0, cycle)) if s.stagger else 0.0)
    now = 0.0
    while events:
        now, _, kind, data = heapq.heappop(events)
        if kind == "send":
            (job,) = data
            outstanding[job] = s.requests
            for _ in range(s.requests):
                server = choose()
                server.requests += 1
                server.in_transit += 1
                push(up.transfer(now, s.bytes_sent) + s.rtt_s / 2, "arrive", server.index, job)
        elif kind == "cores":
            if data[0] != cores.version:
                continue  # the work on the cores changed since this completion was scheduled
            for payload in cores.finished(now):
                if payload[0] == "job":
                    _, job, cpu = payload
                    push(now + max(0.0, _draw(rng, s.other_s, s.other_cv) - cpu) + s.overhead_s, "send", job)
                else:
                    push(now, *payload)
            reschedule()
        elif kind == "arrive":
            index, job = data
            server = servers[index]
            server.in_transit -= 1
            server.queue.append((now, job))
            try_start(server, now)
        elif kind == "timer":
            server = servers[data[0]]
            if server.timer_at is not None and server.timer_at <= now:
                server.timer_at = None
                try_start(server, now)
        elif kind == "executed":
            index, jobs = data
            server = servers[index]
            server.free += 1
            server.executing -= len(jobs)
            for job in jobs:
                push(down.transfer(now, s.bytes_received) + s.rtt_s / 2, "answer", job)
            try_start(server, now)
        elif kind == "answer":
            (job,) = data
            outstanding[job] -= 1
            if outstanding[job]:
                continue
            done_events[job] += 1
            if done_events[job] > s.warmup:
                times[job].append(now - event_start[job])
                completions[job].append(now)
            if done_events[job] < s.events:
                start_event(job, now)
    flat = np.concatenate([np.asarray(t) for t in times])
    total = max(now, 1e-12)
    share_total = sum(server.requests for server in servers) or 1
    return Result(
        scenario=asdict(s),
        time_per_event_median=float(np.median(flat)),
        time_per_event_p90=float(np.percentile(flat, 90)),
        events_per_s=steady_rate(completions) or s.jobs / float(np.mean(flat)),  # closed loop when no common stretch
        server_utilisation=[min(1.0, server.busy_s / (total * s.instances)) for server in servers],
        server_share=[server.requests / share_total for server in servers],
        queue_s_per_request=float(np.mean(queue_waits)) if queue_waits else 0.0,
        link_utilisation=(up.busy_s / total) if rate else None,
        peak_link_bytes_per_s=_peak_rate(up.transfers, down.transfers) if rate else None,
        knee_jobs=knee(s))


def steady_rate(completions: list[list[float]]) -> float:
    """Events per second while every job was running: the sum of each job's rate between the latest first
    and the earliest last completion of any job (the start and the tail are not steady). The scale
    benchmark counts its measured jobs the same way."""
    runs = [c for c in completions if c]
    if not runs:
        return 0.0
    first, last = max(c[0] for c in runs), min(c[-1] for c in runs)
    total = 0.0
    for c in runs:  # each job's own rate inside the window (events between its completions there)
        inside = [t for t in c if first <= t <= last]
        if len(inside) >= 2:
            total += (len(inside) - 1) / (inside[-1] - inside[0])
    return total


def _peak_rate(*directions: list[tuple[float, float, float]], window_s: float = 1.0) -> float:
    """The largest bytes per second over any ``window_s`` window (both directions together)."""
    transfers = sorted(t for direction in directions for t in direction)
    if not transfers:
        return 0.0
    end = max(t[1] for t in transfers)
    edges = np.arange(0.0, end + window_s, window_s)
    totals = np.zeros(len(edges))
    for start, stop, size in transfers:
        first, last = int(start // window_s), int(stop // window_s)
        if first == last or stop <= start:
            totals[first] += size
            continue
        rate = size / (stop - start)
        for k in range(first, last + 1):
            overlap = min(stop, (k + 1) * window_s) - max(start, k * window_s)
            totals[k] += rate * max(0.0, overlap)
    return float(totals.max() / window_s)


def knee(s: Scenario) -> float:
    """The deterministic knee in jobs: a job's time per event alone over the busy time it costs the
    servers (per server: jobs beyond this wait in queues)."""
    transfer = (s.bytes_sent + s.bytes_received) / (s.link_gbps * 1e9 / 8) if s.link_gbps else 0.0
    alone = s.other_s + s.overhead_s + s.service_s * s.requests + transfer + s.rtt_s
    capacity = s.service_s * s.requests / (s.servers * s.instances)
    if s.link_gbps:  # each direction apart: the busier one bounds
        capacity = max(capacity, max(s.bytes_sent, s.bytes_received) * s.requests / (s.link_gbps * 1e9 / 8))
    host = s.cpu_s + (s.service_s * s.requests if s.server_on_cores else 0.0)
    if s.cores and host:
        capacity = max(capacity, host / s.cores)
    return alone / capacity if capacity > 0 else math.inf


def from_measurement(other_s: float, server_s_per_event: float, requests_per_event: float,
                     bytes_per_event: float | None = None, sent_fraction: float = 1.0, **settings: Any) -> dict[str, Any]:
    """Scenario settings from a task's measured per-event figures (the planner's inputs): the server
    time and bytes of an event are divided over its requests (rounded to at least one)."""
    requests = max(1, round(requests_per_event))
    total_bytes = bytes_per_event or 0.0
    return {"other_s": other_s, "service_s": server_s_per_event / requests, "requests": requests,
            "bytes_sent": total_bytes * sent_fraction / requests,
            "bytes_received": total_bytes * (1 - sent_fraction) / requests, **settings}
