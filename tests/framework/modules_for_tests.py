"""Module types used by the framework tests (registered by class name like any module)."""

from __future__ import annotations

import threading
import time

import numpy as np

from sonic_hep.framework import ExternalWork, Filter, InputTag, Output, Param, Producer, delayed


class TAdd(Producer):
    """Puts src + offset (src: a product holding a number, or nothing → event index)."""

    src = InputTag("", optional=True)
    offset = Param(int, 1)
    value = Output("int")

    def produce(self, event):
        base = event.get(self.src) if self.src else event.index
        event.put("value", int(base) + self.offset)


class TCycleA(Producer):
    src = InputTag("b:value")
    value = Output("int")

    def produce(self, event):
        event.put("value", 0)


class TEvenFilter(Filter):
    """Keeps events with an even index."""

    def filter(self, event):
        return event.index % 2 == 0


class TSleep(Producer):
    """Sleeps (releasing the GIL) then puts the event index; records the peak number of concurrent calls."""

    ms = Param(float, 50.0)
    value = Output("int")
    active = 0
    peak = 0
    lock = threading.Lock()

    def produce(self, event):
        cls = type(self)
        with cls.lock:
            cls.active += 1
            cls.peak = max(cls.peak, cls.active)
        time.sleep(self.ms / 1000)
        with cls.lock:
            cls.active -= 1
        event.put("value", event.index)


class TWait(ExternalWork):
    """External work finishing after a delay that depends on the event (so completion order is shuffled)."""

    ms = Param(float, 100.0)
    jitter = Param(bool, False)
    value = Output("int")
    jets = Output("per-event jagged array")

    #: ("acquire" | "produce", event index) in the order they ran, across all instances: tests read how many
    #: requests were in flight at once (list.append is atomic under the GIL)
    log: list[tuple[str, int]] = []

    def acquire(self, event):
        TWait.log.append(("acquire", event.index))
        ms = self.ms * (1 + (event.index * 7919 % 5) / 5) if self.jitter else self.ms
        return delayed(event.index, ms / 1000)

    def produce(self, event, result):
        TWait.log.append(("produce", event.index))
        event.put("value", result)
        event.put("jets", np.arange(result % 4, dtype=np.float32) * 1.5)


class TRaise(Producer):
    """Raises on one event index."""

    bad_index = Param(int, 3)
    value = Output("int")

    def produce(self, event):
        if event.index == self.bad_index:
            raise ValueError("boom on purpose")
        event.put("value", event.index)


class TRandom(Producer):
    """Puts a random number from the per-event generator."""

    value = Output("float")

    def produce(self, event):
        event.put("value", float(event.rng().normal()))


class TUndeclared(Producer):
    """Reads a key it did not declare (the framework must refuse)."""

    value = Output("int")

    def produce(self, event):
        event.get("Jet")


class TMutate(Producer):
    """Tries to modify an upstream product in place (the framework must refuse)."""

    src = InputTag("w:jets")
    value = Output("int")

    def produce(self, event):
        jets = event.get(self.src)
        jets[:] = 0
        event.put("value", 0)


class TLifecycle(Producer):
    """Records its instances and hook calls (class-level, for the test to inspect)."""

    fail_at = Param(int, -1)
    value = Output("int: id of the instance that processed the event")
    log: list = []

    def begin_job(self):
        type(self).log.append(("begin", id(self)))

    def end_job(self):
        type(self).log.append(("end", id(self)))

    def produce(self, event):
        if event.index == self.fail_at:
            raise RuntimeError("fail on purpose")
        event.put("value", id(self))


class TSharedLifecycle(TLifecycle):
    """The same, declared thread-safe: one instance serves every stream."""

    shared = True


# -- columnar twins (``columnar = True``: one call per batch of events) ---------------------------------------

class CAdd(Producer):
    """Columnar TAdd: puts src + offset for every event of the batch (src absent → the event index)."""

    columnar = True
    src = InputTag("", optional=True)
    offset = Param(int, 1)
    value = Output("int")
    #: the number of events of each call, across all instances (tests read the batch sizes)
    calls: list[int] = []

    def produce(self, events):
        CAdd.calls.append(len(events))
        base = events.get(self.src) if self.src else events.index
        events.put("value", np.asarray(base, dtype=np.int64) + self.offset)


class CEvenFilter(Filter):
    """Columnar TEvenFilter: keeps events with an even index."""

    columnar = True

    def filter(self, events):
        return events.index % 2 == 0


class CBadFilter(Filter):
    """A columnar filter that returns one decision for the whole batch (the framework must refuse)."""

    columnar = True

    def filter(self, events):
        return True


class CWait(ExternalWork):
    """Columnar TWait: one awaitable for the batch, finishing after a delay."""

    columnar = True
    ms = Param(float, 20.0)
    value = Output("int")
    jets = Output("per-event jagged array")

    def acquire(self, events):
        return delayed(np.asarray(events.index), self.ms / 1000)

    def produce(self, events, result):
        import awkward as ak

        events.put("value", result)
        counts = result % 4
        flat = np.concatenate([np.arange(n, dtype=np.float32) * 1.5 for n in counts]) if len(counts) else []
        events.put("jets", ak.unflatten(np.asarray(flat, dtype=np.float32), counts))


class CRaise(Producer):
    """Columnar TRaise: the batch holding ``bad_index`` fails (and so does that event alone)."""

    columnar = True
    bad_index = Param(int, 3)
    value = Output("int")

    def produce(self, events):
        if np.any(events.index == self.bad_index):
            raise ValueError("boom on purpose")
        events.put("value", events.index)


class CRandom(Producer):
    """Columnar TRandom: each event's number from its own generator."""

    columnar = True
    value = Output("float")

    def produce(self, events):
        events.put("value", np.array([events.rng(k).normal() for k in range(len(events))]))


class CSum(Producer):
    """Columnar: sums a per-event jagged product over each event (reads per-event products stacked)."""

    columnar = True
    src = InputTag("w:jets")
    value = Output("float")

    def produce(self, events):
        import awkward as ak

        events.put("value", ak.to_numpy(ak.sum(events.get(self.src), axis=1)).astype(np.float64))


class TSum(Producer):
    """Per event: sums a jagged product of the event (reads a columnar product one event at a time)."""

    src = InputTag("w:jets")
    value = Output("float")

    def produce(self, event):
        event.put("value", float(np.sum(np.asarray(event.get(self.src), dtype=np.float32), dtype=np.float32)))
