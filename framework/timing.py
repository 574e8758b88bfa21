"""The end-of-job report: per-module counts (CMSSW's TrigReport) and times, memory, events/s.

Per module: how many events it visited, passed and failed (a Filter's accepts and rejects), its wall
and CPU time, and for external work the latency of its result. Workers add to per-thread rows, so
nothing is locked on the hot path; the report is a plain dict (written with ``--timing-json``) and a
text table printed at end of job, each column explained by one line of :data:`LEGEND` (in the JSON
too). Services such as inference add their own sections (e.g. Triton server-side queue and compute
times) through :meth:`Timing.add_section`.

Why "latency" and not "wait": an ExternalWork's result arrives while its worker thread serves other
events, and with S events in flight S results are awaited at once. The sum of those waits divided by the
events (``wait_ms_per_event`` in the JSON, kept for existing readers) is therefore not a share of the
job's time and can exceed the job's ms/event (102 "wait ms/evt" in a 38 ms/event job with 4 streams).
The table shows instead the mean time one event waited for the result, named for what it is.
"""

from __future__ import annotations

import json
import resource
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModuleTiming:
    """Accumulated time of one module label."""

    label: str
    type: str
    kind: str
    calls: int = 0
    wall: float = 0.0
    cpu: float = 0.0
    acquire_wall: float = 0.0
    wait: float = 0.0
    produce_wall: float = 0.0
    #: events a Filter rejected
    rejected: int = 0
    #: times the module was called (a columnar module is called once for many events)
    invocations: int = 0

    @property
    def visited(self) -> int:
        """Events the module ran on (a filter upstream that rejected an event skips it)."""
        return self.calls

    @property
    def passed(self) -> int:
        """Events it let through: a Filter's accepts; every other kind passes the events it visits."""
        return self.calls - self.rejected

    def as_dict(self, events: int) -> dict[str, Any]:
        per = 1000.0 / events if events else 0.0
        out = {"label": self.label, "type": self.type, "kind": self.kind, "calls": self.calls,
               "invocations": self.invocations,
               "events_per_call": self.calls / self.invocations if self.invocations else 0.0,
               "visited": self.visited, "passed": self.passed, "failed": self.rejected,
               "wall_ms_per_event": self.wall * per, "cpu_ms_per_event": self.cpu * per,
               "wall_s": self.wall, "cpu_s": self.cpu}
        if self.kind == "external":
            out.update(acquire_ms_per_event=self.acquire_wall * per, produce_ms_per_event=self.produce_wall * per,
                       wait_ms_per_event=self.wait * per,
                       latency_ms=1000.0 * self.wait / self.calls if self.calls else 0.0)
        return out


#: one line per column of the module table (printed under it, stored in the JSON as ``legend``)
LEGEND: dict[str, str] = {
    "visited": "events the module ran on (a Filter's reject skips the modules it guards)",
    "passed": "events it let through (a Filter's accepts; other kinds pass every event they visit)",
    "failed": "events a Filter rejected",
    "evt/call": "events per call of the module (columnar modules take many; per-event modules 1)",
    "wall ms/evt": "its own wall time / events read (concurrent modules and events: the column may sum past ms/event)",
    "cpu ms/evt": "CPU time of its own calls / events read",
    "latency ms": "ExternalWork: mean time an event waited for its result; holds no thread, overlaps other events",
}


def peak_rss_mb() -> float:
    """The peak resident memory of this process so far, in MB (``getrusage``; a server it started is not
    included). Linux reports kilobytes, macOS bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024 if sys.platform == "darwin" else 1024)


@dataclass
class Timing:
    """Timing of a whole job.

    Args:
        modules: (label, type name, kind) of each scheduled module, in order.
    """

    modules: list[tuple[str, str, str]]
    events: int = 0
    start: float = field(default_factory=time.perf_counter)
    stop: float | None = None
    sections: dict[str, Any] = field(default_factory=dict)
    #: events that passed every filter (set by the process when the job ends)
    passed: int | None = None
    #: events in flight and worker threads the job was configured with, for the report's header
    streams: int = 1
    worker_threads: int = 1
    #: events per batch the scheduler used
    events_per_call: int = 1

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self._tables: list[list[list[float]]] = []
        self.cpu_start = time.process_time()
        self.cpu_stop: float | None = None
        self.peak_rss_mb: float | None = None
        #: (wall, CPU) clocks when the first event was done: see :meth:`first_event_done`
        self.first_event: tuple[float, float] | None = None

    def first_event_done(self) -> None:
        """Marks the end of the job's first event (later calls do nothing). The report's
        ``after_first_event`` leaves out start-up (connections, model metadata, first allocations), which a
        long job amortises and a short one measured for planning does not."""
        if self.first_event is None:
            self.first_event = (time.perf_counter(), time.process_time())

    _FIELDS = ("calls", "wall", "cpu", "acquire_wall", "wait", "produce_wall", "rejected", "invocations")

    def _table(self) -> list[list[float]]:
        """This thread's accumulators (one row per module): no lock on the hot path."""
        table = getattr(self._local, "table", None)
        if table is None:
            table = [[0.0] * len(self._FIELDS) for _ in self.modules]
            self._local.table = table
            with self._lock:
                self._tables.append(table)
        return table

    def reject(self, index: int, events: int = 1) -> None:
        """Filter ``index`` rejected ``events`` events (its call was recorded by :meth:`add`)."""
        self._table()[index][6] += events

    def add(self, index: int, phase: str, wall: float, cpu: float, events: int = 1, calls: int = 1) -> None:
        """Records ``calls`` calls of module ``index`` over ``events`` events: phase is ``run``, ``acquire``,
        ``produce`` or ``wait`` (``wait`` counts ``wall`` once per event: the time each event waited)."""
        row = self._table()[index]
        if phase == "wait":
            row[4] += wall * events
            return
        if phase != "produce":
            row[0] += events
            row[7] += calls
        row[1] += wall
        row[2] += cpu
        if phase == "acquire":
            row[3] += wall
        elif phase == "produce":
            row[5] += wall

    @property
    def per_module(self) -> list[ModuleTiming]:
        """Totals over all threads, one entry per module."""
        with self._lock:
            tables = list(self._tables)
        out = []
        for index, (label, typ, kind) in enumerate(self.modules):
            sums = [sum(table[index][k] for table in tables) for k in range(len(self._FIELDS))]
            out.append(ModuleTiming(label, typ, kind, int(sums[0]), *sums[1:6], rejected=int(sums[6]),
                                    invocations=int(sums[7])))
        return out

    def add_section(self, name: str, data: Any) -> None:
        """Adds a service's report (shown after the module table, stored in the JSON)."""
        self.sections[name] = data

    def finish(self) -> None:
        self.stop = time.perf_counter()
        self.cpu_stop = time.process_time()
        self.peak_rss_mb = peak_rss_mb()

    @property
    def elapsed(self) -> float:
        return (self.stop or time.perf_counter()) - self.start

    def report(self) -> dict[str, Any]:
        """Everything as a JSON-ready dict."""
        elapsed = self.elapsed
        cpu = (self.cpu_stop or time.process_time()) - self.cpu_start
        with self._lock:
            threads = len(self._tables)  # threads that ran module code: a planner divides module time by it
        steady: dict[str, Any] = {}
        if self.first_event is not None and self.events > 1:
            wall_at, cpu_at = self.first_event
            steady = {"after_first_event": {"events": self.events - 1,
                                            "wall_s": (self.stop or time.perf_counter()) - wall_at,
                                            "cpu_s": (self.cpu_stop or time.process_time()) - cpu_at}}
        return {"events": self.events, "events_passed": self.events if self.passed is None else self.passed,
                "wall_s": elapsed, "cpu_s": cpu, "events_per_s": self.events / elapsed if elapsed > 0 else 0.0,
                "threads": threads, "ms_per_event": 1000.0 * elapsed / self.events if self.events else 0.0,
                "peak_rss_mb": self.peak_rss_mb if self.peak_rss_mb is not None else peak_rss_mb(),
                "streams": self.streams, "worker_threads": self.worker_threads,
                "events_per_call": self.events_per_call,
                "modules": [m.as_dict(self.events) for m in self.per_module], "legend": dict(LEGEND),
                **steady, **self.sections}

    def to_json(self) -> str:
        """The report as JSON text."""
        return json.dumps(self.report(), indent=2, default=str)

    def write_json(self, path: str) -> None:
        """Writes the report to ``path`` atomically (a reader never sees half a report)."""
        from .atomic import PendingText

        pending = PendingText(path, "timing JSON")
        try:
            pending.write(self.to_json())
            pending.commit()
        except BaseException:
            pending.abort()
            raise

    def table(self) -> str:
        """The end-of-job report: a header (events, events/s, memory), the per-module table, its legend."""
        rep = self.report()
        failed = rep["events"] - rep["events_passed"]
        lines = [f"{rep['events']} events in {rep['wall_s']:.2f} s: {rep['events_per_s']:.1f} events/s "
                 f"({rep['ms_per_event']:.2f} ms/event), CPU {rep['cpu_s']:.2f} s, "
                 f"peak RSS {rep['peak_rss_mb']:.0f} MB, {rep['streams']} stream(s) x {rep['worker_threads']} thread(s), "
                 f"{rep['events_per_call']} event(s) per call",
                 f"events: {rep['events']} read, {rep['events_passed']} passed every filter, {failed} rejected by one",
                 f"{'module':<20} {'type':<22} {'kind':<9} {'visited':>8} {'passed':>8} {'failed':>7} "
                 f"{'evt/call':>8} {'wall ms/evt':>11} {'cpu ms/evt':>10} {'latency ms':>10}"]
        for m in rep["modules"]:
            latency = f"{m['latency_ms']:10.3f}" if "latency_ms" in m else f"{'':>10}"
            lines.append(f"{m['label']:<20} {m['type'][:22]:<22} {m['kind']:<9} {m['visited']:8d} {m['passed']:8d} "
                         f"{m['failed']:7d} {m['events_per_call']:8.1f} {m['wall_ms_per_event']:11.3f} "
                         f"{m['cpu_ms_per_event']:10.3f} {latency}")
        width = max(len(name) for name in LEGEND)
        lines += [f"  {name:<{width}}  {text}" for name, text in LEGEND.items()]
        for name, data in self.sections.items():
            text = data.get("table") if isinstance(data, dict) else None
            if text:
                lines += ["", f"[{name}]", text]
        return "\n".join(lines)
