"""The module kinds a process is made of: Producer, Filter, Analyzer and ExternalWork.

A module declares its parameters (:class:`~sonic_hep.framework.params.Param`), what it consumes
(:class:`~sonic_hep.framework.params.InputTag`) and what it produces
(:class:`~sonic_hep.framework.params.Output`) on the class, so the framework validates the
configuration and builds the DAG without running anything. The scheduler owns threads and waiting;
modules own neither.

Each stream gets its own instance of a module unless the class sets ``shared = True`` (then one
instance serves all streams and must be thread-safe).

A module works on one event per call (CMSSW's idiom, the default) or, with ``columnar = True``, on a batch
of events per call (coffea's idiom: each consumed key is one awkward array with an entry per event). In
Python the cost is per call, so columnar modules are the fast path; both kinds mix in one DAG, and the
framework stacks and slices products between them. A columnar skeleton::

    class JetPtSum(Producer):
        columnar = True
        jets = InputTag("Jet", fields=("pt",))
        ht = Output("sum of jet pt in GeV (float)")

        def produce(self, events):                      # events: EventBatch, len(events) events
            events.put("ht", ak.to_numpy(ak.sum(events.get(self.jets).pt, axis=1)))

A columnar Filter returns a boolean mask with one entry per event; a columnar ExternalWork's ``acquire``
sends the whole batch's objects in one request (the client splits it at the model's max_batch_size).

A copy-paste skeleton of each kind, per event::

    class JetPtSum(Producer):
        \"\"\"Scalar sum of jet pt per event.\"\"\"
        jets = InputTag("Jet", fields=("pt",), doc="jets to sum")
        ht = Output("sum of jet pt in GeV (float)")

        def produce(self, event):
            event.put("ht", float(np.sum(event.get(self.jets).pt)))

    class TwoJets(Filter):
        jets = InputTag("Jet", fields=("pt",))
        def filter(self, event):
            return len(event.get(self.jets)) >= 2

    class Tagger(ExternalWork):
        jets = InputTag("Jet", fields=("pt", "eta"))
        scores = Output("per-jet score")
        def acquire(self, event):
            x = ...                      # build inputs, vectorised
            return some_client.infer(x)  # a Future or coroutine; returns at once
        def produce(self, event, result):
            event.put("scores", result)
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from .errors import ParamError
from .params import InputTag, Output, Param, declared

if TYPE_CHECKING:  # pragma: no cover
    from .event import EventView

_REGISTRY: dict[str, type[Module]] = {}


class Module(abc.ABC):
    """Base of every module. Subclasses are registered by class name for use in configs.

    Args:
        label (str): the module's label in the process (unique; prefixes its products).
        params (Mapping[str, Any]): validated parameter values (see :meth:`validate_params`).
    """

    #: one instance for all streams (the class must then be thread-safe)
    shared: ClassVar[bool] = False
    #: services (by name) the module needs; the process enables them
    requires: ClassVar[tuple[str, ...]] = ()
    #: short kind name shown by ``sonic describe`` and the timing report
    kind: ClassVar[str] = "module"
    #: the methods take a batch of events (:class:`~.batch.EventBatch`: each consumed key as one array with an
    #: entry per event, one array put per product) instead of one event: the fast path in Python, where the
    #: cost is per call; per-event modules (the default) keep CMSSW's idiom
    columnar: ClassVar[bool] = False
    #: memory one event of a batch needs in this module (MB): its inputs, temporaries and products. The
    #: scheduler sums it over the job's modules to choose the events per call that fit ``options.memory_mb``
    memory_per_event_mb: ClassVar[float] = 0.1

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if abstract or cls.__name__.startswith("_"):
            return
        previous = _REGISTRY.get(cls.__name__)
        if previous is not None and (previous.__module__, previous.__qualname__) != (cls.__module__, cls.__qualname__):
            raise TypeError(f"module type {cls.__name__!r} defined twice: {previous.__module__} and {cls.__module__}")
        _REGISTRY[cls.__name__] = cls

    def __init__(self, label: str, params: Mapping[str, Any]):
        self.label = label
        self.params = dict(params)
        self.services: Mapping[str, Any] = {}

    # -- declarations ---------------------------------------------------------------------------
    @classmethod
    def parameters(cls) -> dict[str, Param]:
        """Declared parameters (inputs included), by name."""
        return declared(cls, Param)

    @classmethod
    def outputs(cls) -> dict[str, Output]:
        """Declared products, by instance name."""
        return declared(cls, Output)

    @classmethod
    def validate_params(cls, given: Mapping[str, Any]) -> dict[str, Any]:
        """Returns the full parameter set (defaults filled in) or raises :class:`ParamError`.

        The error names the parameter and the reason, so the caller can name file and key.
        """
        declared_params = cls.parameters()
        values: dict[str, Any] = {}
        for name in given:
            if name not in declared_params:
                raise ParamError(name, "unknown", "unknown parameter", sorted(declared_params))
        for name, param in declared_params.items():
            if name in given:
                try:
                    values[name] = param.validate(given[name])
                except (TypeError, ValueError) as err:
                    raise ParamError(name, "value", str(err)) from None
            elif param.required:
                raise ParamError(name, "missing", "missing required parameter")
            else:
                values[name] = param.default
        return values

    def inputs(self) -> dict[str, InputTag]:
        """The InputTag parameters, by the key they resolve to with this instance's values."""
        return {self.params[name]: tag for name, tag in declared(type(self), InputTag).items()
                if self.params[name] is not None and self.params[name] != ""}

    def consumes(self) -> list[str]:
        """Event keys this instance reads (resolved InputTag values)."""
        return list(self.inputs())

    def produces(self) -> list[str]:
        """Product keys this instance puts: ``label:instance``."""
        return [f"{self.label}:{name}" for name in self.outputs()]

    # -- lifecycle --------------------------------------------------------------------------------
    def begin_job(self) -> None:
        """Called once per instance before the first event (open resources, book histograms)."""

    def end_job(self) -> None:
        """Called once per instance after the last event, also when the job fails."""

    def service(self, name: str) -> Any:
        """A framework service (e.g. ``"inference"``) enabled for this process."""
        try:
            return self.services[name]
        except KeyError:
            raise KeyError(f"module '{self.label}' asked for service {name!r}, which is not enabled "
                           f"(declare it in the class's `requires`)") from None

    @classmethod
    def describe(cls) -> str:
        """Multi-line description for ``sonic describe``."""
        doc = (cls.__doc__ or "").strip()
        granularity = "columnar: many events per call" if cls.columnar else "per event"
        lines = [f"{cls.__name__} ({cls.kind}, {granularity}) — {cls.__module__}", ""]
        if doc:
            lines += ["  " + line.strip() for line in doc.splitlines()] + [""]
        params = cls.parameters()
        lines.append("parameters:" if params else "parameters: none")
        lines += ["  " + p.describe() for p in params.values()]
        outs = cls.outputs()
        lines.append("products:" if outs else "products: none")
        lines += [f"  <label>:{name}: {o.doc}" for name, o in outs.items()]
        if cls.requires:
            lines.append("services: " + ", ".join(cls.requires))
        return "\n".join(lines)


class Producer(Module, abstract=True):
    """Computes products from an event's inputs."""

    kind = "producer"

    @abc.abstractmethod
    def produce(self, event: EventView) -> None:
        """Reads ``event.get(...)`` and calls ``event.put(instance, value)``."""


class Filter(Module, abstract=True):
    """Decides whether the event continues: on the path, modules after it are skipped for rejected events,
    and rejected events are not written. Off the path it runs only when its products are needed, and then
    decides nothing (CMSSW ignores an unscheduled filter's decision too)."""

    kind = "filter"

    @abc.abstractmethod
    def filter(self, event: EventView) -> bool:
        """True keeps the event."""


class Analyzer(Module, abstract=True):
    """Reads events and fills summaries (e.g. ``hist`` histograms) saved at the end of the job.

    Per-stream instances each fill their own histograms; :meth:`histograms` of all instances are
    summed at end of job and written to the output file under ``<label>/<name>``.
    """

    kind = "analyzer"

    @abc.abstractmethod
    def analyze(self, event: EventView) -> None:
        """Reads the event; puts nothing."""

    def histograms(self) -> dict[str, Any]:
        """Histograms to save (``hist.Hist`` or anything uproot writes), by name."""
        return {}


class ExternalWork(Module, abstract=True):
    """A producer whose work happens elsewhere (CMSSW's ExternalWork): a coprocessor or a server.

    ``acquire`` prepares inputs and starts the work, returning at once with something awaitable: a
    ``concurrent.futures.Future``, an ``asyncio`` coroutine/future, or a plain value when the result
    is already known. While the work runs, the worker thread serves other modules and events;
    ``produce`` runs when the result is in.
    """

    kind = "external"

    @abc.abstractmethod
    def acquire(self, event: EventView) -> Any:
        """Starts the work and returns an awaitable result; must not block on it."""

    @abc.abstractmethod
    def produce(self, event: EventView, result: Any) -> None:
        """Puts products built from the completed work's result."""


def registered() -> dict[str, type[Module]]:
    """All module types known so far, by name (call :func:`lookup` to load plug-in packages)."""
    return dict(_REGISTRY)
