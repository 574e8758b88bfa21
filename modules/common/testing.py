"""Modules for tests and framework benchmarks: do-nothing work and external work that only waits."""

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
    value = Output("int: the event index")

    def produce(self, event):
        deadline = time.monotonic() + self.timeout_s
        while not os.path.exists(self.path):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.path} did not appear within {self.timeout_s} s")
            time.sleep(0.05)
        event.put("value", event.index)
