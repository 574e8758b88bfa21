"""The fleet's manager: the autoscaler loop, run detached by ``sonic fleet start`` (``python -m`` this module).

Every ``interval_s`` it samples Triton's statistics API on every live server of the fleet (cumulative
requests and queue nanoseconds per model; the difference to the last sample is the interval's), asks the
rule (:mod:`.fleet_autoscale`) and acts: ``up`` submits one more server job through the fleet's executor,
``down`` asks the idle server job to leave (it deregisters, drains and ends), ``backoff`` says why no server
job is added now (the ones before failed in a row). Every decision other than ``hold`` is appended to
``logs/autoscaler.jsonl`` with the metric that drove it, and logged.

With ``stop_with_tasks``, the fleet stops once every task submitted against it (``sonic submit --fleet``)
has no job pending or running. SIGTERM (``sonic fleet stop``) or the fleet's ``stop`` file ends the loop;
SIGTERM from elsewhere stops the fleet too, so no server job outlives its manager unnoticed.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path

from ...framework.inference.sonic import ServerConnection
from ...framework.inference import RequestError
from ...framework.inference.serving import Entry
from .errors import GridError
from .fleet import DECISIONS, STOP_FILE, TASKS_FILE, Fleet
from . import fleet_prometheus
from .fleet_autoscale import Autoscaler, Decision, Rule, Sample
from .records import read_json

log = logging.getLogger(__name__)


class Sampler:
    """Per-server differences of Triton's cumulative counters between two calls."""

    def __init__(self, credentials: dict[str, str] | None = None):
        self.credentials = credentials or {}
        self.connections: dict[str, ServerConnection] = {}
        self.last: dict[str, tuple[float, float]] = {}  # server name → (requests, queue_ns) at the last sample

    source = "statistics"

    @staticmethod
    def members(fleet: Fleet) -> tuple[dict[str, Entry], int, int, str]:
        """The live servers (by name), the server jobs starting, those that failed, and the newest failure."""
        members = fleet.members()
        live = {m.name: m.entry for m in members if m.entry is not None and not m.expired and not m.stopping}
        starting = sum(1 for m in members if m.state in ("pending", "running") and m.name not in live
                       and not m.stopping)
        failed = [m for m in members if m.state == "failed"]
        last = f"server job {failed[-1].index}: {failed[-1].reason.splitlines()[0]}" if failed and \
            failed[-1].reason else ""
        return live, starting, len(failed), last

    def sample(self, fleet: Fleet) -> Sample:
        live, starting, failed, last = self.members(fleet)
        requests: dict[str, int] = {}
        queue_ns = answered = 0.0
        for name, entry in live.items():
            connection = self.connections.get(name)
            if connection is None or connection.address != entry.address:
                connection = self.connections[name] = ServerConnection(entry.spec(self.credentials))
            try:
                stats = connection.statistics()
            except RequestError as err:
                log.info("server %s (%s) did not give statistics: %s", name, entry.address, err)
                requests[name] = -1  # live, load unknown: not idle
                continue
            now = (sum(s["requests"] for s in stats.values()), sum(s["queue_ns"] for s in stats.values()))
            before = self.last.get(name, now)
            self.last[name] = now
            requests[name] = int(now[0] - before[0])
            answered += now[0] - before[0]
            queue_ns += now[1] - before[1]
        for name in set(self.connections) - set(live):
            self.connections.pop(name).close(grace_s=0.0)
            self.last.pop(name, None)
        return Sample(queue_ms=queue_ns / answered / 1e6 if answered else None, requests=requests, starting=starting,
                      failed=failed, last_failure=last)

    def close(self) -> None:
        for connection in self.connections.values():
            connection.close(grace_s=0.0)


def record(fleet: Fleet, decision: Decision, **extra: object) -> None:
    """Appends a decision to ``logs/autoscaler.jsonl`` (one JSON object per line) and logs it."""
    line = {"time": time.time(), **decision.as_dict(), **extra}
    with open(fleet.directory / DECISIONS, "a") as stream:
        stream.write(json.dumps(line) + "\n")
    log.info("autoscaler: %s%s: %s", decision.action, f" {decision.server}" if decision.server else "",
             decision.reason)


def tasks_over(fleet: Fleet) -> bool:
    """Whether tasks were submitted against the fleet and none has a job pending or running."""
    from .status import collect
    from .task import Task

    listed = read_json(fleet.directory / TASKS_FILE) or []
    if not listed:
        return False
    for directory in listed:
        try:
            statuses, _ = collect(Task(directory), log_lines=0)
        except GridError:
            continue
        if any(s.state in ("new", "pending", "running") for s in statuses):
            return False
    return True


def settings(fleet: Fleet) -> tuple[Rule, bool]:
    """The autoscaling rule in ``fleet.json`` and whether the fleet stops with its tasks."""
    values = dict(fleet.spec.autoscale or {})
    stop_with_tasks = bool(values.pop("stop_with_tasks", False))
    return Rule(**values), stop_with_tasks


def manage(fleet: Fleet, stop: threading.Event, clock=time.monotonic) -> None:  # noqa: ANN001 - a clock
    """The loop (see the module docstring) until ``stop`` is set or the fleet is stopping."""
    autoscaler = Autoscaler(settings(fleet)[0])
    prometheus = fleet_prometheus.start_for(fleet)  # --prometheus local: the fleet's own, stopped with the manager
    sampler = fleet_prometheus.sampler_for(fleet, Sampler({k: v for k, v in (
        ("private_key", fleet.spec.tls_client_key), ("certificate_chain", fleet.spec.tls_client_cert)) if v}),
        autoscaler.rule.interval_s)
    log.info("fleet %s: manager running (%s; load from %s)", fleet.directory, autoscaler.rule, sampler.source)
    try:
        while not stop.is_set() and not fleet.stopping:
            interval = autoscaler.rule.interval_s
            try:
                fleet = Fleet(fleet.directory)  # `sonic fleet scale` may have changed the settings
                fleet_prometheus.keep_in_step(fleet.directory)  # its scrape targets follow the directory
                rule, stop_with_tasks = settings(fleet)
                if rule != autoscaler.rule:
                    log.info("fleet %s: new autoscaling settings %s", fleet.directory, rule)
                    autoscaler.rule, interval = rule, rule.interval_s
                decision = autoscaler.decide(clock(), sampler.sample(fleet))
                if decision.action == "up":
                    try:
                        record(fleet, decision, metric=sampler.source, added=fleet.add(1))
                    except GridError as err:
                        record(fleet, decision, metric=sampler.source, refused=str(err))
                elif decision.action == "down":
                    fleet.retire(int(decision.server))
                    record(fleet, decision, metric=sampler.source)
                elif decision.action == "backoff":
                    record(fleet, decision, metric=sampler.source)
                if stop_with_tasks and tasks_over(fleet):
                    log.info("fleet %s: every task submitted against it has ended; stopping the fleet",
                             fleet.directory)
                    break
            except Exception:  # noqa: BLE001 - one bad sample (a record being replaced, a batch system hiccup)
                log.exception("fleet %s: this round of the manager failed; trying again", fleet.directory)
            stop.wait(interval)
    finally:
        sampler.close()
        if prometheus is not None:
            prometheus.stop()
    (fleet.directory / STOP_FILE).write_text(f"stopped by its manager at {time.time()}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}", description=__doc__)
    parser.add_argument("directory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    manage(Fleet(Path(args.directory)), stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
