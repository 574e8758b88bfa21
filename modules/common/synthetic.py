"""Modules of synthetic work, for tests and the framework benchmarks: do-nothing work, CPU burnt on purpose,
external work that only waits, and a module that holds events until a file appears.

They measure what the framework itself costs per call and prove that a worker is free while external work
is in flight; none computes physics. (Testing your own module: :func:`sonic_hep.framework.testing.run_module`.)
"""

from __future__ import annotations

import os
import time

from ...framework import ExternalWork, InputTag, Output, Param, Producer, delayed


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
    from_event = Param(int, 0, doc="hold only the events from this index on (the job runs that many first)")
    value = Output("int: the event index")

    def produce(self, event):
        deadline = time.monotonic() + self.timeout_s
        while event.index >= self.from_event and not os.path.exists(self.path):
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
