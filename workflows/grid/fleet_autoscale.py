"""The autoscaler's rule: SuperSONIC's (KEDA on queue latency), decided on samples, tested with a fake clock.

Every ``interval_s`` the fleet's manager samples Triton's statistics API of every live server and hands
:meth:`Autoscaler.decide` one :class:`Sample`: the average queue time per request across the fleet over
the last interval, and how many requests each server answered in it. The rule, in order:

====================================================  ========  ============================================
condition                                             decision  why
====================================================  ========  ============================================
running + starting servers < ``min_servers``          ``up``    replace a server job that ended
average queue ms > ``threshold_ms`` in every sample   ``up``    requests wait: one more server (if below
for ``window_s``, none starting, below ``max``                   ``max_servers``; the window restarts)
a server answered nothing for ``idle_s``, the fleet   ``down``  it costs a GPU and serves nobody (the
is not above the threshold, above ``min_servers``               last one to start goes first)
otherwise                                             ``hold``
====================================================  ========  ============================================

One server at a time: while a new server job is starting no other is added, and a removed server's idle
clock is forgotten. The decision carries the numbers that drove it, for the manager's log.

**Backoff**: server jobs that fail one after another (a broken node, a fleet directory nobody can write)
must not be replaced as fast as the manager samples. After the first failure the next server job goes at
once (a cancelled server is replaced without delay); after each further failure in a row every ``up`` waits
``backoff_s``, doubling up to ``backoff_max_s``, and the first decision held back is a ``backoff`` that says
why. A server that registers (joins the live ones) ends the run of failures.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

from .errors import GridError

Action = Literal["up", "down", "hold", "backoff"]


@dataclass(frozen=True)
class Rule:
    """The autoscaler's settings (``sonic fleet start --min-servers ... --scale-*``)."""

    min_servers: int = 1
    max_servers: int = 1
    threshold_ms: float = 10.0
    window_s: float = 60.0
    idle_s: float = 300.0
    interval_s: float = 5.0
    backoff_s: float = 15.0
    backoff_max_s: float = 600.0

    def __post_init__(self) -> None:
        if not 0 <= self.min_servers <= self.max_servers or self.max_servers < 1:
            raise GridError(f"autoscaling needs 0 <= --min-servers ({self.min_servers}) <= --max-servers "
                            f"({self.max_servers}) and --max-servers >= 1")
        for name in ("threshold_ms", "window_s", "idle_s"):
            if getattr(self, name) < 0:
                raise GridError(f"--scale-{name.replace('_', '-')} must not be negative, got {getattr(self, name)}")
        if self.interval_s <= 0:
            raise GridError(f"--scale-interval-s must be positive, got {self.interval_s}")
        if not 0 <= self.backoff_s <= self.backoff_max_s:
            raise GridError(f"autoscaling needs 0 <= backoff_s ({self.backoff_s}) <= backoff_max_s "
                            f"({self.backoff_max_s})")

    def backoff(self, failures: int) -> float:
        """Seconds to wait before the next server job after ``failures`` failed in a row (0 after one)."""
        return 0.0 if failures <= 1 else min(self.backoff_s * 2.0 ** (failures - 2), self.backoff_max_s)


@dataclass(frozen=True)
class Sample:
    """What the fleet looked like over the last interval.

    Args:
        queue_ms: average queue time per request across every live server (None: no request answered).
        requests: requests each live server answered in the interval, by server name (-1: unknown, e.g. its
            statistics did not come in time; it counts as running and not idle).
        starting: server jobs submitted (or running) that have not registered yet.
        failed: server jobs of the fleet that ended failed, so far (the autoscaler counts new ones).
        last_failure: the newest failed server job and why, for the backoff's reason.
    """

    queue_ms: float | None
    requests: dict[str, int] = field(default_factory=dict)
    starting: int = 0
    failed: int = 0
    last_failure: str = ""


@dataclass(frozen=True)
class Decision:
    """What to do, on which server (``down``), and why: the rule's words and the metric."""

    action: Action
    reason: str
    server: str | None = None
    queue_ms: float | None = None
    servers: int = 0
    starting: int = 0
    retry_in_s: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


class Autoscaler:
    """Keeps the clocks of the rule (since when the queue is above the threshold, since when each server is
    idle) between samples; :meth:`decide` is the whole rule (see the module docstring)."""

    def __init__(self, rule: Rule):
        self.rule = rule
        self.above_since: float | None = None
        self.idle_since: dict[str, float] = {}
        self.live: set[str] = set()
        self.failed_seen: int | None = None  # failed server jobs at the last sample (None: no sample yet)
        self.failures = 0  # failed in a row since a server last registered
        self.retry_at: float | None = None  # no server job before this (backoff)
        self.announced: float | None = None  # the retry_at a ``backoff`` decision already reported

    def _count_failures(self, now: float, sample: Sample) -> None:
        """Failures in a row and the backoff they set (see the module docstring)."""
        joined = set(sample.requests) - self.live
        self.live = set(sample.requests)
        new = 0 if self.failed_seen is None else max(0, sample.failed - self.failed_seen)
        self.failed_seen = sample.failed  # failures before the manager's first sample are not in a row
        if joined:
            self.failures, self.retry_at = 0, None
        if new:
            self.failures += new
            delay = self.rule.backoff(self.failures)
            self.retry_at = now + delay if delay else None

    def _backing_off(self, now: float, sample: Sample, wanted: str, metric: dict) -> Decision | None:
        """The decision that holds back an ``up`` (``wanted``: its reason) during a backoff; None outside one."""
        if self.retry_at is None or now >= self.retry_at:
            return None
        action: Action = "backoff" if self.announced != self.retry_at else "hold"
        self.announced = self.retry_at
        wait = self.retry_at - now
        last = f" (last: {sample.last_failure})" if sample.last_failure else ""
        return Decision(action, f"{wanted}, but {self.failures} server jobs failed in a row{last}; next one in "
                                f"{wait:.0f} s (backoff {self.rule.backoff(self.failures):.0f} s, at most "
                                f"{self.rule.backoff_max_s:.0f} s)", retry_in_s=wait, **metric)

    def decide(self, now: float, sample: Sample) -> Decision:
        rule = self.rule
        running = len(sample.requests)
        metric = {"queue_ms": sample.queue_ms, "servers": running, "starting": sample.starting}
        self._count_failures(now, sample)
        above = sample.queue_ms is not None and sample.queue_ms > rule.threshold_ms
        self.above_since = (self.above_since if self.above_since is not None else now) if above else None
        for name in list(self.idle_since):
            if name not in sample.requests:
                del self.idle_since[name]  # gone from the fleet
        for name, count in sample.requests.items():
            if count != 0:
                self.idle_since.pop(name, None)
            else:
                self.idle_since.setdefault(name, now)

        if running + sample.starting < rule.min_servers:
            wanted = f"{running} running + {sample.starting} starting < min {rule.min_servers}"
            return self._backing_off(now, sample, wanted, metric) or Decision("up", wanted, **metric)
        if above and now - self.above_since >= rule.window_s:
            if sample.starting:
                return Decision("hold", f"queue {sample.queue_ms:.3f} ms > {rule.threshold_ms} ms for "
                                        f"{now - self.above_since:.0f} s, but a server is starting", **metric)
            if running >= rule.max_servers:
                return Decision("hold", f"queue {sample.queue_ms:.3f} ms > {rule.threshold_ms} ms for "
                                        f"{now - self.above_since:.0f} s, at max {rule.max_servers}", **metric)
            waited = now - self.above_since
            wanted = (f"queue {sample.queue_ms:.3f} ms/request > {rule.threshold_ms} ms for {waited:.0f} s "
                      f"(window {rule.window_s:.0f} s)")
            held = self._backing_off(now, sample, wanted, metric)
            if held:
                return held
            self.above_since = None  # the next server only after another full window
            return Decision("up", wanted, **metric)
        if not above and running > rule.min_servers:
            idle = sorted((name for name, since in self.idle_since.items() if now - since >= rule.idle_s),
                          reverse=True)
            if idle:
                name = idle[0]
                waited = now - self.idle_since.pop(name)
                return Decision("down", f"server {name} answered no request for {waited:.0f} s "
                                        f"(idle limit {rule.idle_s:.0f} s), above min {rule.min_servers}",
                                server=name, **metric)
        return Decision("hold", "within bounds", **metric)
