"""A circuit breaker per server: a server that stops answering leaves the rotation after a few failures.

Triton says nothing when it hangs (a stopped process, a wedged backend): its requests simply pass
their deadline. Without a breaker every new request is sent to it and waits ``timeout_s`` before
failing over, so a job pays one timeout per request. With it, ``threshold`` consecutive deadlines or
unreachable answers take the server out for a back-off; then **one** cheap probe (``is_server_live``
with a short timeout) decides: an answer brings it back, silence takes it out again for twice as long
(capped).

States: ``closed`` (in rotation) → ``open`` (out, until the back-off ends) → ``half_open`` (out, one
probe in flight) → ``closed`` | ``open``. Every (state, event) pair is listed in :data:`TABLE`, so
nothing is decided by accident, and :class:`Breaker` is a plain object driven by events and a clock:
it is tested without threads, servers or network (``tests/inference/test_breaker.py``).

::

    breaker = Breaker(BreakerSettings(threshold=3))
    breaker.record("failure", now)          # a deadline: counted
    breaker.usable()                        # True while closed
    breaker.poll(now)                       # "probe" once an open breaker's back-off is over
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

State = Literal["closed", "open", "half_open"]
#: ``success``: the server answered (a result, or an error that is the request's own fault);
#: ``failure``: a request passed its deadline or found the server unreachable;
#: ``trip``: decisive evidence that it is down (a probe failed, or the failure that reached the threshold);
#: ``backoff_over``: the open breaker's back-off has ended (the clock says so, see :meth:`Breaker.poll`)
Event = Literal["success", "failure", "trip", "backoff_over"]
#: what the breaker did, for the caller: ``probe`` asks it to start the half-open probe; ``open``/``reopen``
#: say the server just left the rotation (requests still waiting on it should fail over)
Action = Literal["none", "count", "reset", "open", "probe", "close", "reopen"]

STATES: tuple[State, ...] = ("closed", "open", "half_open")
EVENTS: tuple[Event, ...] = ("success", "failure", "trip", "backoff_over")

#: gRPC statuses that count against a server (it did not answer); any other answer proves it is alive
FAILURE_STATUSES = frozenset({"DEADLINE_EXCEEDED", "UNAVAILABLE"})

#: (state, event) → (new state, action)
TABLE: dict[tuple[State, Event], tuple[State, Action]] = {
    ("closed", "success"): ("closed", "reset"),          # only *consecutive* failures count
    ("closed", "failure"): ("closed", "count"),          # the threshold-th one arrives as "trip"
    ("closed", "trip"): ("open", "open"),                # out for the base back-off
    ("closed", "backoff_over"): ("closed", "none"),      # no back-off running
    ("open", "success"): ("open", "none"),               # a late answer to a request sent before: the probe decides
    ("open", "failure"): ("open", "none"),               # requests sent before it opened, failing late
    ("open", "trip"): ("open", "none"),                  # already out (e.g. the statistics refresh agrees)
    ("open", "backoff_over"): ("half_open", "probe"),    # one probe, nothing else is sent
    ("half_open", "success"): ("closed", "close"),       # the probe (or any request) was answered: back in rotation
    ("half_open", "failure"): ("open", "reopen"),        # still silent: out again, for longer
    ("half_open", "trip"): ("open", "reopen"),
    ("half_open", "backoff_over"): ("half_open", "none"),  # the probe is still running
}

#: allowed moves between states (what TABLE may do; checked by the tests)
MOVES: dict[State, frozenset[State]] = {
    "closed": frozenset({"closed", "open"}),
    "open": frozenset({"open", "half_open"}),
    "half_open": frozenset({"half_open", "closed", "open"}),
}


@dataclass(frozen=True)
class BreakerSettings:
    """How quickly a server leaves and rejoins the rotation.

    Args:
        threshold (int): consecutive failures (deadlines, unreachable) that take the server out.
        backoff_s (float): first back-off; doubled after each failed probe.
        max_backoff_s (float): the longest back-off (a server back after a long outage is used again
            within this time).
        probe_timeout_s (float): deadline of the half-open probe (a live server answers in a millisecond).
    """

    threshold: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    probe_timeout_s: float = 1.0

    def __post_init__(self) -> None:
        if self.threshold < 1:
            raise ValueError(f"breaker threshold must be at least 1, not {self.threshold}")
        if not 0 < self.backoff_s <= self.max_backoff_s:
            raise ValueError(f"breaker back-off must satisfy 0 < backoff_s ({self.backoff_s}) <= max_backoff_s "
                             f"({self.max_backoff_s})")
        if self.probe_timeout_s <= 0:
            raise ValueError(f"breaker probe_timeout_s must be positive, not {self.probe_timeout_s}")


def event_for(status: str | None) -> Event:
    """The event a finished request means: ``None`` (a result) or a gRPC status name."""
    return "failure" if status in FAILURE_STATUSES else "success"


class Breaker:
    """One server's breaker. Not thread-safe by itself: the pool calls it under its lock.

    Attributes:
        state: "closed", "open" or "half_open".
        failures: consecutive failures counted while closed.
        backoff: the current (or next) back-off in seconds.
        until: when an open breaker's back-off ends (monotonic seconds).
        opened: how many times it opened (for reports and tests).
    """

    def __init__(self, settings: BreakerSettings | None = None):
        self.settings = settings or BreakerSettings()
        self.state: State = "closed"
        self.failures = 0
        self.backoff = self.settings.backoff_s
        self.until = 0.0
        self.opened = 0

    def record(self, event: Event, now: float) -> Action:
        """Applies ``event`` (see :data:`TABLE`) and returns what was done."""
        if event == "failure" and self.state == "closed" and self.failures + 1 >= self.settings.threshold:
            event = "trip"
        self.state, action = TABLE[(self.state, event)]
        if action == "count":
            self.failures += 1
        elif action in ("reset", "close"):
            self.failures = 0
            if action == "close":
                self.backoff = self.settings.backoff_s
        elif action in ("open", "reopen"):
            if action == "reopen":
                self.backoff = min(2 * self.backoff, self.settings.max_backoff_s)
            self.failures = 0
            self.until = now + self.backoff
            self.opened += 1
        return action

    def poll(self, now: float) -> Action:
        """Moves an open breaker whose back-off is over to half-open: returns "probe" when the caller
        must now probe the server (exactly once per back-off)."""
        if self.state == "open" and now >= self.until:
            return self.record("backoff_over", now)
        return "none"

    def usable(self) -> bool:
        """Whether requests may go to the server."""
        return self.state == "closed"
