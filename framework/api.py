"""The Python API: run a configuration from Python (a script, a notebook) and get a result object, or iterate
over the products of a run in memory without writing a file.

Both take what ``sonic run`` takes: a YAML file or a shipped configuration's name (or the configuration as a
dict), and overrides, as ``-p`` strings (``["source.max_events=100"]``) or a dict (``{"source.max_events":
100}``). Everything is checked as on the command line; errors are the same one-line
:class:`~sonic_hep.framework.errors.SonicError` subclasses.

Example::

    from sonic_hep.framework import events, run

    result = run("demo_inference", {"source.events": 200}, output="demo.root")
    print(result.events, result.written, result.output, result.modules["tagger"].latency_ms)
    print(result)                       # the end-of-job report (as sonic run prints it)

    for event in events("demo_inference", {"source.events": 10}):
        print(event.index, event["tagger:scores"])       # products in memory, nothing written
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .config import ProcessConfig, apply_overrides, load, parse
from .event import Event, EventID
from .process import Process, RunResult
from .timing import Timing

Overrides = Mapping[str, Any] | list[str] | tuple[str, ...] | None


@dataclass(frozen=True)
class ModuleReport:
    """One module's line of the end-of-job report (see :data:`~sonic_hep.framework.timing.LEGEND`)."""

    label: str
    type: str
    kind: str
    visited: int
    passed: int
    failed: int
    wall_ms_per_event: float
    cpu_ms_per_event: float
    #: ExternalWork only: mean time an event waited for its result (None for other kinds)
    latency_ms: float | None = None


@dataclass
class Result:
    """What a run did.

    Attributes:
        events: events read and processed.
        written: events that passed every filter (those written when there is an output file).
        output: the output file's path (None without ``output.file``).
        histograms: the Analyzers' histograms (``hist.Hist``), by ``"<label>/<name>"``.
        timing: the full :class:`~sonic_hep.framework.timing.Timing` (``report()`` is the timing JSON).
        config: the validated configuration that ran.
    """

    events: int
    written: int
    output: str | None
    histograms: dict[str, Any]
    timing: Timing
    config: ProcessConfig = field(repr=False)

    @property
    def modules(self) -> dict[str, ModuleReport]:
        """Per-module counts and times, by label, in the job's module order."""
        out = {}
        for m in self.timing.report()["modules"]:
            out[m["label"]] = ModuleReport(m["label"], m["type"], m["kind"], m["visited"], m["passed"], m["failed"],
                                           m["wall_ms_per_event"], m["cpu_ms_per_event"], m.get("latency_ms"))
        return out

    @property
    def report(self) -> dict[str, Any]:
        """The end-of-job report as a dict (what ``--timing-json`` writes)."""
        return self.timing.report()

    def __str__(self) -> str:
        return self.timing.table()


class EventProducts(Mapping[str, Any]):
    """One event's products (``"label:instance"``) and the source columns the configuration writes, in memory.

    Attributes:
        index: the event's position in the job (0-based).
        id: where it comes from (file, entry, run/lumi/event numbers).
        passed: whether it passed every filter.
    """

    __slots__ = ("index", "id", "passed", "_values")

    def __init__(self, index: int, event_id: EventID, passed: bool, values: dict[str, Any]):
        self.index, self.id, self.passed, self._values = index, event_id, passed, values

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise KeyError(f"{key!r} is not among this run's products (it has {sorted(self._values)}); "
                           f"output.products selects them") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"<event {self.index} ({self.id}): {', '.join(self._values)}>"


def configure(config: str | Mapping[str, Any] | ProcessConfig, overrides: Overrides = None) -> ProcessConfig:
    """A validated configuration from a file, a shipped name, a dict or a ProcessConfig, with overrides.

    Args:
        config: a YAML path, a shipped configuration's name (``"miniaod"``), the configuration as a dict
            (relative paths and ``imports`` then resolve from the current folder), or a ProcessConfig.
        overrides: ``["key.path=value", ...]`` as ``-p`` takes them, or ``{"key.path": value}``.
    """
    strings = _override_strings(overrides)
    if isinstance(config, ProcessConfig):
        if not strings:
            return config
        return parse(apply_overrides(_copy(config.raw), strings, file=config.file), file=config.file)
    if isinstance(config, Mapping):
        return parse(apply_overrides(_copy(dict(config)), strings), file=None)
    return load(config, strings)


def run(config: str | Mapping[str, Any] | ProcessConfig, overrides: Overrides = None, *, output: str | None = None,
        timing_json: str | None = None) -> Result:
    """Runs a configuration to the end, as ``sonic run`` does, and returns what it did.

    Args:
        config: see :func:`configure`.
        overrides: see :func:`configure`.
        output (str | None): the output file (``-o``); without it, ``output.file`` of the configuration.
        timing_json (str | None): also write the report as JSON (``--timing-json``).

    Returns:
        Result: events read and written, per-module report, timing, histograms, output path. Histograms are
        returned even when there is no output file.
    """
    extra = {"output.file": output} if output is not None else {}
    cfg = configure(config, {**_as_dict(overrides), **extra} if extra else overrides)
    return _result(Process(cfg).run(timing_json=timing_json, progress=False, keep_histograms=True), cfg)


class EventStream:
    """The events of a run, in input order, as :class:`EventProducts`; made by :func:`events`.

    The job runs on a background thread while you iterate (at most ``buffer`` events ahead). Leaving the
    loop early (``break``) stops the job and its servers. After the loop, :attr:`result` holds the run's
    :class:`Result` (histograms included).
    """

    def __init__(self, process: Process, everything: bool, buffer: int):
        self.process = process
        self.everything = everything
        self.result: Result | None = None
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=max(1, buffer))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._keys = list(process.output_products) + list(process.output_columns)

    def _on_event(self, event: Event, passed: bool) -> None:
        if not (passed or self.everything):
            return
        values = {key: event.get(key) for key in self._keys if event.has(key)}
        item = ("event", EventProducts(event.index, event.id, passed, values))
        while True:
            if self._stop.is_set():
                raise _Abandoned("the loop over events was left")
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _work(self) -> None:
        try:
            outcome = self.process.run(progress=False, on_event=self._on_event, keep_histograms=True)
            self._put(("done", outcome))
        except BaseException as err:  # noqa: BLE001 - handed to the iterating thread
            self._put(("error", err))

    def _put(self, item: tuple[str, Any]) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def __iter__(self) -> Iterator[EventProducts]:
        if self._thread is not None:
            raise RuntimeError("an EventStream can be iterated once; call events() again")
        self._thread = threading.Thread(target=self._work, name="sonic-events", daemon=True)
        self._thread.start()
        try:
            while True:
                kind, value = self._queue.get()
                if kind == "event":
                    yield value
                elif kind == "done":
                    self.result = _result(value, self.process.config)
                    return
                else:
                    raise value
        finally:
            self.close()

    def close(self) -> None:
        """Stops the job if it is still running (its output, if any, is discarded) and waits for it."""
        self._stop.set()
        if self._thread is not None:
            while self._thread.is_alive():
                try:
                    self._queue.get(timeout=0.1)  # unblock a producer waiting for room
                except queue.Empty:
                    pass

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def events(config: str | Mapping[str, Any] | ProcessConfig, overrides: Overrides = None, *, everything: bool = False,
           buffer: int = 64) -> EventStream:
    """Iterates over the products of a run in memory, without writing a file.

    The products are those ``output.products`` selects (all by default, source columns named there too),
    keyed by product key (``"tagger:scores"``) or column name. ``output.file`` is ignored.

    Args:
        config: see :func:`configure`.
        overrides: see :func:`configure`.
        everything (bool): also the events a filter rejected (``event.passed`` says which).
        buffer (int): events the job may run ahead of the loop.

    Example::

        for event in events("demo_inference", ["source.events=5"]):
            print(event.index, event["tagger:scores"])
    """
    cfg = configure(config, {**_as_dict(overrides), "output.file": None})
    return EventStream(Process(cfg), everything, buffer)


class _Abandoned(Exception):
    """Raised on the job's thread when the consumer of an EventStream went away."""


def _result(outcome: RunResult, cfg: ProcessConfig) -> Result:
    return Result(events=outcome.events, written=outcome.written, output=outcome.output,
                  histograms=dict(outcome.histograms), timing=outcome.timing, config=cfg)


def _override_strings(overrides: Overrides) -> list[str]:
    """``-p``-style strings from a list of them or a dict (values as JSON, which YAML reads back)."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{key}={value if isinstance(value, _Raw) else json.dumps(value)}" for key, value in overrides.items()]
    if isinstance(overrides, str):
        return [overrides]
    return list(overrides)


def _as_dict(overrides: Overrides) -> dict[str, Any]:
    """Overrides as an ordered dict of key → YAML text or value (so the API's own keys can be added)."""
    if isinstance(overrides, Mapping):
        return dict(overrides)
    out: dict[str, Any] = {}
    for text in _override_strings(overrides):
        key, _, value = text.partition("=")
        out[key.strip()] = _Raw(value)
    return out


class _Raw(str):
    """An override value already in ``-p`` text form."""


def _copy(data: Any) -> Any:
    return json.loads(json.dumps(data, default=str))
