"""A test bench for module authors (CMSSW's ``TestProcessor``): run one module on columns you give it, with the
framework's own checks, and look at what it put.

::

    import awkward as ak
    from sonic_hep.framework.testing import run_module

    jets = ak.Array([{"pt": [50.0, 20.0]}, {"pt": []}])
    run = run_module(JetPtSum, {"Jet": jets})
    assert run.products["ht"] == [70.0, 0.0]

A module that runs models gets an inference client through ``inference=``: a
:class:`~sonic_hep.framework.inference.fake.FakeClient` that answers with python functions (no model files),
or a real client: ``inference={"mode": "direct", "repository": ["data/models/demo"]}`` builds the same
client a job's ``services.inference`` section builds (``"mode": "sonic"`` with ``servers`` or a local
fallback server), and closes it when the run ends.

:func:`run_modules` runs a few modules together, through a real :class:`~.process.Process` (its scheduler, so
a filter stops the later modules for the events it rejects, as in a job) on the same kind of columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .batch import Batch, EventBatch, concatenate
from .errors import ModuleError
from .event import Chunk, Event, EventView
from .futures import as_future
from .module import Analyzer, Module
from .scheduler import kind_of
from .config import SourceConfig, parse
from .process import Process
from .services import Service, service_class
from .source import ColumnSource, Request
from .timing import Timing


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
               services: Mapping[str, Any] | None = None, inference: Any = None,
               events_per_call: int | None = None, **params: Any) -> ModuleRun:
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
        services (Mapping[str, Any] | None): services it ``requires``, by name.
        inference: the ``inference`` service's client: an :class:`~.inference.InferenceClient` (a fake one
            for unit tests), or a ``services.inference`` settings dict, from which the run builds the real
            client and closes it at the end.
        events_per_call (int | None): events per call of a columnar module (None: all events in one call).
        **params: parameter values, as in a configuration.

    Returns:
        ModuleRun: products per event, filter decisions, histograms.

    Raises:
        ModuleError: the module failed, naming it, the phase and the event (as in a job).
    """
    module = module_type(label, module_type.validate_params(params))
    module.services = dict(services or {})
    owned = None
    if isinstance(inference, Mapping):
        owned = service_class("inference")(dict(inference))  # found as a job finds it, by name
        module.services["inference"] = owned
    elif inference is not None:
        module.services["inference"] = GivenClient(inference)
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
        try:
            module.end_job()
        finally:
            if owned is not None:
                owned.end_job()
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


@dataclass
class ProcessRun:
    """What :func:`run_modules` saw, in input order: every product by key (``"<label>:<instance>"``) as a list
    with one entry per event (None where it was not put: a filter before the module rejected the event, or the
    module put nothing), whether each event passed every filter (what a job writes), the Analyzers'
    histograms by ``"<label>/<name>"``, and the job's timing (per module: events visited and passed)."""

    products: dict[str, list[Any]]
    passed: list[bool]
    histograms: dict[str, Any]
    timing: Timing = field(repr=False)

    def visited(self, label: str) -> int:
        """Events module ``label`` ran on (fewer than all when a filter before it rejected some)."""
        return next(m["visited"] for m in self.timing.report()["modules"] if m["label"] == label)


class GivenClient(Service):
    """An ``inference`` service holding a client made elsewhere instead of making one: the caller's, in
    :func:`run_module` and :func:`run_modules` (the caller closes it: a fake client is looked at after the run).
    ``fake.use_client`` installs a subclass that closes it with the job."""

    name = "inference"

    def __init__(self, client: Any):
        super().__init__({})
        self.client = client


def run_modules(modules: Mapping[str, Mapping[str, Any]], inputs: Mapping[str, Any], *,
                path: list[str] | None = None, inference: Any = None,
                options: Mapping[str, Any] | None = None) -> ProcessRun:
    """Runs a small DAG of modules on columns you give it, as a job runs it: the configuration checked as
    ``sonic run`` checks it, the modules scheduled by the real scheduler (columnar and per-event modules mixed,
    filters acting along ``path``), one stream and one thread unless ``options`` says otherwise.

    Args:
        modules: ``{label: {"type": ..., **parameters}}``, a configuration's ``modules`` section, where
            ``type`` is the class itself (taken as it is, so a class defined in a test works) or a name as a
            configuration spells it (``"HardEvent"``, ``"my_analysis.HardEvent"``, ``"package.module:Class"``).
        inputs: the source's columns by the keys the modules consume, one entry per event (as for
            :func:`run_module`); served from memory by a :class:`~.source.ColumnSource`.
        path (list[str] | None): the path, as in a configuration (default: every module, in the modules'
            order): a filter off it selects nothing, an analyzer off it does not run.
        inference: an :class:`~.inference.InferenceClient` (a fake one), or ``services.inference`` settings
            from which the job builds, starts and stops the real service.
        options: the configuration's ``options`` (``events_per_call``, ``streams``, ``threads``, ``seed``).

    Returns:
        ProcessRun: every product per event, whether each event passed, histograms, timing.

    Raises:
        ConfigError: an unknown type or parameter, a bad DAG (as in a job).
        SourceError: a consumed key is not among ``inputs``.
        ModuleError: a module failed, naming it, the phase and the event.
    """
    types = {label: spec["type"] for label, spec in modules.items() if isinstance(spec.get("type"), type)}
    section = {label: {**spec, "type": f"{cls.__module__}:{cls.__qualname__}"} if (cls := types.get(label)) else
               dict(spec) for label, spec in modules.items()}
    settings: dict[str, Any] = {"process": "run_modules", "modules": section,
                                "options": {"progress": False, **(options or {})}}
    if path is not None:
        settings["path"] = list(path)
    if isinstance(inference, Mapping):
        settings["services"] = {"inference": dict(inference)}

    def source(config: SourceConfig, requests: list[Request]) -> ColumnSource:
        return ColumnSource(config, requests, dict(inputs))

    process = Process(parse(settings), module_types=types, source=source)
    if inference is not None and not isinstance(inference, Mapping):
        process.services["inference"] = GivenClient(inference)  # instead of the one settings would build
    keys = [key for module in process.prototypes.values() for key in module.produces()]
    products: dict[str, list[Any]] = {key: [] for key in keys}
    decisions: list[bool] = []

    def collect(event: Event, passed: bool) -> None:
        put = event.products
        for key, values in products.items():
            values.append(put.get(key))
        decisions.append(bool(passed))

    result = process.run(progress=False, on_event=collect, keep_histograms=True)
    return ProcessRun(products, decisions, dict(result.histograms), result.timing)
