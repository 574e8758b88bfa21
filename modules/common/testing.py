"""Testing helpers for module authors (:func:`run_module`), and modules for tests and framework benchmarks:
do-nothing work and external work that only waits.

Test your own module in a few lines, without ROOT files or a configuration::

    from sonic_hep.modules.common.testing import run_module

    jets = ak.Array([{"pt": [50.0, 20.0]}, {"pt": []}])
    run = run_module(JetPtSum, {"Jet": jets})
    assert run.products["ht"] == [70.0, 0.0]
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...framework import Analyzer, ExternalWork, InputTag, Module, Output, Param, Producer, delayed
from ...framework.batch import Batch, EventBatch, concatenate
from ...framework.errors import ModuleError
from ...framework.event import Chunk, Event, EventView
from ...framework.futures import as_future
from ...framework.scheduler import kind_of


@dataclass
class ModuleRun:
    """What :func:`run_module` saw: each product (by instance name) as a list with one entry per event (None
    where the module did not put it), whether each event passed (a Filter's decisions; True otherwise), and
    an Analyzer's histograms.

    An event's entry of a columnar module's product is its row of the stacked array (a numpy scalar or row,
    an awkward list or record), as a per-event module downstream would read it; :meth:`stacked` gives the
    whole array, as the ROOT output writes it.
    """

    module: Module
    products: dict[str, list[Any]] = field(default_factory=dict)
    passed: list[bool] = field(default_factory=list)
    histograms: dict[str, Any] = field(default_factory=dict)
    batches: list[Batch] = field(default_factory=list, repr=False)

    def stacked(self, instance: str) -> Any:
        """Product ``instance`` over all events as one array (numpy or awkward): a columnar module's arrays
        joined across calls, a per-event module's values stacked by the rule the ROOT output uses."""
        key = f"{self.module.label}:{instance}"
        return concatenate([batch.products[key].take(None) for batch in self.batches])


def run_module(module_type: type[Module], inputs: Mapping[str, Any], label: str = "module",
               services: Mapping[str, Any] | None = None, events_per_call: int | None = None,
               **params: Any) -> ModuleRun:
    """Runs one module over events, calling it as the scheduler does (its kind's method; for external work
    ``acquire``, the awaited result, then ``produce``), with the same checks: parameters validated against
    the class's declarations, only declared inputs readable, only declared products writable. A columnar
    module is called once per ``events_per_call`` events (default: all at once), a per-event module once
    per event.

    Args:
        module_type (type[Module]): the class under test.
        inputs (Mapping[str, Any]): the event's columns by the keys the module consumes: one entry per event
            (an awkward array of records for a collection, a numpy array for a branch, upstream products).
        label (str): the module's label (its products are ``<label>:<instance>``).
        services (Mapping[str, Any] | None): services it ``requires`` (an inference client ...).
        events_per_call (int | None): events per call of a columnar module (None: all events in one call).
        **params: parameter values, as in a configuration.

    Returns:
        ModuleRun: products per event, filter decisions, histograms.

    Raises:
        ModuleError: the module failed, naming it, the phase and the event (as in a job).
    """
    module = module_type(label, module_type.validate_params(params))
    module.services = dict(services or {})
    lengths = {len(column) for column in inputs.values()}
    if len(lengths) > 1:
        raise ValueError(f"inputs have different numbers of events: { {k: len(v) for k, v in inputs.items()} }")
    events = lengths.pop() if lengths else 1
    chunk = Chunk(columns=dict(inputs), file="<run_module>", entry_start=0, length=events, first_index=0)
    consumes = frozenset(module.consumes())
    optional = frozenset(key for key, tag in module.inputs().items() if tag.optional)
    run = ModuleRun(module, products={instance: [] for instance in module.outputs()})
    step = (events_per_call or max(events, 1)) if module.columnar else 1
    module.begin_job()
    try:
        for start in range(0, events, step):
            batch = Batch(chunk, start, min(step, events - start))
            views: list[Any] = ([EventBatch(batch, module, consumes, optional)] if module.columnar else
                                [EventView(Event(batch, 0), module, consumes, optional)])
            passed = _call(module, views[0], batch)
            run.passed += [bool(p) for p in np.broadcast_to(passed, (batch.size,))]
            run.batches.append(batch)
            for instance, values in run.products.items():
                product = batch.products.get(f"{label}:{instance}")
                values += [product.at(k) if product is not None and product.covers(k) else None
                           for k in range(batch.size)]
        if isinstance(module, Analyzer):
            run.histograms = dict(module.histograms())
    finally:
        module.end_job()
    return run


def _call(module: Module, view: Any, batch: Batch) -> Any:
    """One call of ``module`` as the scheduler makes it (its kind's method from the scheduler's own table; for
    external work, the awaited result into ``produce``); returns the filter's decision (True otherwise)."""
    kind = kind_of(module)
    phase = kind.phase
    try:
        outcome = getattr(module, kind.method)(view)
        if kind.external:
            pending = as_future(outcome)
            result = pending.result() if pending is not None else outcome
            phase = "produce"
            module.produce(view, result)
    except Exception as err:
        raise ModuleError(module.label, batch.describe(), phase, err) from err
    return np.asarray(outcome, dtype=bool) if kind.filters else True


class NullProducer(Producer):
    """Puts its event index and does nothing else: measures the scheduler's own cost per module call."""

    src = InputTag("", doc="optional upstream key, to chain null modules", optional=True)
    value = Output("int: the event index")

    def produce(self, event):
        if self.src:
            event.get(self.src)
        event.put("value", event.index)


class BusyProducer(Producer):
    """Spins the CPU for ``ms`` milliseconds (holding the GIL), then puts the event index."""

    ms = Param(float, 1.0, doc="CPU time to burn per event (ms)")
    value = Output("int: the event index")

    def produce(self, event):
        end = time.perf_counter() + self.ms / 1000
        while time.perf_counter() < end:
            pass
        event.put("value", event.index)


class SleepExternal(ExternalWork):
    """External work that completes after ``ms`` milliseconds without holding any thread.

    Stands in for a remote call: proves the worker is free while the request is in flight.
    """

    ms = Param(float, 100.0, doc="time until the external result arrives (ms)")
    value = Output("int: the event index, returned by the external work")

    def acquire(self, event):
        return delayed(event.index, self.ms / 1000)

    def produce(self, event, result):
        event.put("value", result)


class WaitForFile(Producer):
    """Holds every event until ``path`` exists (polling; no CPU burnt), then puts the event index.

    Lets a test (or an operator rehearsing failure handling) freeze a job at a known point, then cancel,
    kill or release it deterministically instead of racing the job's speed.
    """

    path = Param(str, doc="file whose existence releases the events")
    timeout_s = Param(float, 300.0, doc="give up (and fail the event) after this many seconds")
    value = Output("int: the event index")

    def produce(self, event):
        deadline = time.monotonic() + self.timeout_s
        while not os.path.exists(self.path):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.path} did not appear within {self.timeout_s} s")
            time.sleep(0.05)
        event.put("value", event.index)


# Columnar twins (``columnar = True``: one call per batch of events), for the framework benchmarks: the cost
# of a module call amortised over the events of a batch, against the per-event modules above.


class ColumnarNullProducer(Producer):
    """Puts its events' indices and does nothing else: the scheduler's own cost per columnar call."""

    columnar = True
    src = InputTag("", doc="optional upstream key, to chain null modules", optional=True)
    value = Output("int: the event index")

    def produce(self, events):
        if self.src:
            events.get(self.src)
        events.put("value", events.index)


class ColumnarBusyProducer(Producer):
    """Spins the CPU for ``ms`` milliseconds per event of the call (holding the GIL), then puts the indices:
    the same CPU per event as :class:`BusyProducer`, in one call per batch."""

    columnar = True
    ms = Param(float, 1.0, doc="CPU time to burn per event (ms)")
    value = Output("int: the event index")

    def produce(self, events):
        end = time.perf_counter() + len(events) * self.ms / 1000
        while time.perf_counter() < end:
            pass
        events.put("value", events.index)


class ColumnarSleepExternal(ExternalWork):
    """External work for a whole batch that completes after ``ms`` milliseconds without holding any thread:
    one remote call per batch, as a columnar inference producer makes."""

    columnar = True
    ms = Param(float, 100.0, doc="time until the external result for the batch arrives (ms)")
    value = Output("int: the event index, returned by the external work")

    def acquire(self, events):
        return delayed(events.index, self.ms / 1000)

    def produce(self, events, result):
        events.put("value", result)
