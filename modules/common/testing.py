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

from ...framework import Analyzer, ExternalWork, Filter, InputTag, Module, Output, Param, Producer, delayed
from ...framework.errors import ModuleError
from ...framework.event import Chunk, Event, EventView
from ...framework.futures import as_future


@dataclass
class ModuleRun:
    """What :func:`run_module` saw: each product (by instance name) as a list with one entry per event (None
    where the module did not put it), whether each event passed (a Filter's decisions; True otherwise), and
    an Analyzer's histograms."""

    module: Module
    products: dict[str, list[Any]] = field(default_factory=dict)
    passed: list[bool] = field(default_factory=list)
    histograms: dict[str, Any] = field(default_factory=dict)


def run_module(module_type: type[Module], inputs: Mapping[str, Any], label: str = "module",
               services: Mapping[str, Any] | None = None, **params: Any) -> ModuleRun:
    """Runs one module over events, calling it as the scheduler does (its kind's method; for external work
    ``acquire``, the awaited result, then ``produce``), with the same checks: parameters validated against
    the class's declarations, only declared inputs readable, only declared products writable.

    Args:
        module_type (type[Module]): the class under test.
        inputs (Mapping[str, Any]): the event's columns by the keys the module consumes: one entry per event
            (an awkward array of records for a collection, a numpy array for a branch, upstream products).
        label (str): the module's label (its products are ``<label>:<instance>``).
        services (Mapping[str, Any] | None): services it ``requires`` (an inference client ...).
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
    module.begin_job()
    try:
        for i in range(events):
            event = Event(chunk, i)
            view = EventView(event, module, consumes, optional)
            passed, phase = True, "run"
            try:
                if isinstance(module, ExternalWork):
                    phase = "acquire"
                    pending = as_future(module.acquire(view))
                    result = pending.result() if pending is not None else None
                    phase = "produce"
                    module.produce(view, result)
                elif isinstance(module, Filter):
                    passed = bool(module.filter(view))
                elif isinstance(module, Analyzer):
                    module.analyze(view)
                else:
                    module.produce(view)
            except Exception as err:
                raise ModuleError(label, str(event.id), phase, err) from err
            run.passed.append(passed)
            for instance, values in run.products.items():
                values.append(event.products.get(f"{label}:{instance}"))
        if isinstance(module, Analyzer):
            run.histograms = dict(module.histograms())
    finally:
        module.end_job()
    return run


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
