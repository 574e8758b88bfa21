"""Per-module timing: wall and CPU time per call, and for external work the acquire→produce wait.

Workers add measurements under one lock (a few hundred nanoseconds uncontended); the report is a
plain dict (written with ``--timing-json``) and a text table printed at end of job. Services such as
inference add their own sections (e.g. Triton server-side queue and compute times) through
:meth:`Timing.add_section`.
"""

from __future__ import annotations

import json
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

    def as_dict(self, events: int) -> dict[str, Any]:
        per = 1000.0 / events if events else 0.0
        out = {"label": self.label, "type": self.type, "kind": self.kind, "calls": self.calls,
               "wall_ms_per_event": self.wall * per, "cpu_ms_per_event": self.cpu * per,
               "wall_s": self.wall, "cpu_s": self.cpu}
        if self.kind == "external":
            out.update(acquire_ms_per_event=self.acquire_wall * per, produce_ms_per_event=self.produce_wall * per,
                       wait_ms_per_event=self.wait * per)
        return out


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

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self._tables: list[list[list[float]]] = []
        self.cpu_start = time.process_time()
        self.cpu_stop: float | None = None

    _FIELDS = ("calls", "wall", "cpu", "acquire_wall", "wait", "produce_wall")

    def _table(self) -> list[list[float]]:
        """This thread's accumulators (one row per module): no lock on the hot path."""
        table = getattr(self._local, "table", None)
        if table is None:
            table = [[0.0] * len(self._FIELDS) for _ in self.modules]
            self._local.table = table
            with self._lock:
                self._tables.append(table)
        return table

    def add(self, index: int, phase: str, wall: float, cpu: float) -> None:
        """Records one call of module ``index``: phase is ``run``, ``acquire``, ``produce`` or ``wait``."""
        row = self._table()[index]
        if phase == "wait":
            row[4] += wall
            return
        if phase != "produce":
            row[0] += 1
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
            out.append(ModuleTiming(label, typ, kind, int(sums[0]), *sums[1:]))
        return out

    def add_section(self, name: str, data: Any) -> None:
        """Adds a service's report (shown after the module table, stored in the JSON)."""
        self.sections[name] = data

    def finish(self) -> None:
        self.stop = time.perf_counter()
        self.cpu_stop = time.process_time()

    @property
    def elapsed(self) -> float:
        return (self.stop or time.perf_counter()) - self.start

    def report(self) -> dict[str, Any]:
        """Everything as a JSON-ready dict."""
        elapsed = self.elapsed
        cpu = (self.cpu_stop or time.process_time()) - self.cpu_start
        with self._lock:
            threads = len(self._tables)  # threads that ran module code: a planner divides module time by it
        return {"events": self.events, "wall_s": elapsed, "cpu_s": cpu,
                "events_per_s": self.events / elapsed if elapsed > 0 else 0.0, "threads": threads,
                "modules": [m.as_dict(self.events) for m in self.per_module], **self.sections}

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
        """The end-of-job table (ms per event; for external work also the wait on the result)."""
        rep = self.report()
        lines = [f"{rep['events']} events in {rep['wall_s']:.2f} s ({rep['events_per_s']:.1f} events/s, "
                 f"CPU {rep['cpu_s']:.2f} s)",
                 f"{'module':<20} {'type':<22} {'kind':<9} {'wall ms/evt':>11} {'cpu ms/evt':>10} {'wait ms/evt':>11}"]
        for m in rep["modules"]:
            wait = f"{m['wait_ms_per_event']:11.3f}" if "wait_ms_per_event" in m else f"{'':>11}"
            lines.append(f"{m['label']:<20} {m['type'][:22]:<22} {m['kind']:<9} {m['wall_ms_per_event']:11.3f} "
                         f"{m['cpu_ms_per_event']:10.3f} {wait}")
        for name, data in self.sections.items():
            text = data.get("table") if isinstance(data, dict) else None
            if text:
                lines += ["", f"[{name}]", text]
        return "\n".join(lines)
