"""A process: configuration → validated modules → DAG → source, scheduler, output → a run report.

This is the one place that wires the rooms together (like cmsRun's EventProcessor, kept small):

    cfg = config.load("configs/demo.yaml", ["source.max_events=100"])
    result = Process(cfg).run()
    print(result.timing.table())

Everything a user can get wrong is checked before the first event: module types and parameters, the
DAG, the input files, branches and entry range, the output selection in the constructor; then, first
thing in :meth:`Process.run` and before any service starts (a Triton server, say), every file the job
writes (the ROOT output, the timing JSON) is checked and created under a temporary name.
"""

from __future__ import annotations

import dataclasses
import logging
import platform
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import graph as dag
from .atomic import PendingText
from .config import AUTO_EVENTS_PER_CALL, ProcessConfig, SourceConfig
from .event import Event
from .errors import ConfigError, OutputError, ParamError, SonicError
from .module import Analyzer, Module
from .output import RootOutput, branch_name
from .provenance import redact, software_versions
from .registry import lookup
from .scheduler import Scheduler
from .services import Service, service_class
from .source import Request, make_source
from .timing import Timing

log = logging.getLogger(__name__)


class Interrupted(SonicError):
    """The job was stopped by a signal (SIGINT, SIGTERM); nothing was written.

    Its exit code is 128 + the signal number, as a shell reports a process the signal killed.
    """

    def __init__(self, message: str, signum: int = signal.SIGINT):
        super().__init__(message)
        self.signum = int(signum)
        self.exit_code = 128 + self.signum


class Stop(KeyboardInterrupt):
    """Raised in the main thread by a SIGTERM handler (``sonic run``), so the job stops as on SIGINT."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


@dataclass
class RunResult:
    """What a finished job did."""

    events: int
    written: int
    output: str | None
    timing: Timing
    #: the Analyzers' histograms summed over streams, by ``"<label>/<name>"`` (also written to the output)
    histograms: dict[str, Any] = field(default_factory=dict)


def software_version() -> str:
    try:
        from importlib.metadata import version

        return version("sonic-hep")
    except Exception:  # noqa: BLE001 - running from a checkout without installing
        return "unknown"


class _Outputs:
    """The files one job writes (the ROOT output, the timing JSON), under temporary names until committed.

    ``path`` is the output's final name once it has one: a stop signal that lands after that finds
    a complete output, and says so.
    """

    def __init__(self, root: RootOutput | None, report: PendingText | None):
        self.root = root
        self.report = report
        self.path: str | None = None

    def commit(self, timing: Timing) -> None:
        """Gives every output its final name."""
        if self.report is not None:
            self.report.write(timing.to_json())  # content first: a full disk fails before the output is renamed
        if self.root is not None:
            self.path = self.root.commit()
        if self.report is not None:
            self.report.commit()

    def abort(self) -> None:
        """Removes whatever the failed job had started writing."""
        if self.root is not None:
            self.root.abort()
        if self.report is not None:
            self.report.abort()


class _Emitter:
    """Receives the processed events in input order: fills the output with those that passed, counts."""

    def __init__(self, root: RootOutput | None, bar: Any, on_event: Callable[[Event, bool], None] | None = None):
        self.root = root
        self.bar = bar
        self.on_event = on_event
        #: events handed over (the count a stopped job reports)
        self.emitted = 0
        #: events that passed every filter
        self.written = 0

    def __call__(self, event: Any, passed: bool) -> None:
        self.emitted += 1
        if self.root is not None and passed:
            self.root.fill(event)
        self.written += passed
        if self.on_event is not None:
            self.on_event(event, passed)
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Process:
    """A validated, ready-to-run job.

    Args:
        config (ProcessConfig): the parsed configuration.
        open_source (bool): open and check the input files now (``False`` for ``sonic graph``).
        module_types: classes by label, taken as they are instead of looked up by ``type:`` (the testing
            helper runs classes a test defines, which no name may reach).
        source: makes the source from ``source`` config and the consumed keys instead of :func:`make_source`
            (the testing helper serves columns held in memory).
    """

    def __init__(self, config: ProcessConfig, open_source: bool = True, *,
                 module_types: Mapping[str, type[Module]] | None = None,
                 source: Callable[[SourceConfig, list[Request]], Any] | None = None):
        self.config = config
        self._given_types = dict(module_types or {})
        self.module_types = {label: self._module_type(mc) for label, mc in config.modules.items()}
        self.module_params = {label: self._module_params(mc) for label, mc in config.modules.items()}
        proto = {label: cls(label, self.module_params[label]) for label, cls in self.module_types.items()}
        patterns = [p.split(" as ")[0].strip() for p in config.output.products]
        self.graph = dag.build(proto, config.path, patterns)
        self.prototypes = {label: proto[label] for label in self.graph.order}
        self.output_products, self.output_columns = self._output_selection()
        self.requests = self._source_requests()
        self.source = (source or make_source)(config.source, self.requests) if open_source else None
        self.events_per_call = self._events_per_call(self.source.total if self.source is not None else None)
        if self.source is not None and self.events_per_call > config.source.chunk_size:
            # batches never span two chunks: a chunk holds at least one batch
            self.source.config = dataclasses.replace(config.source, chunk_size=self.events_per_call)
        self.services = self._make_services()

    def _events_per_call(self, total: int | None) -> int:
        """``options.events_per_call``, or when it is 0 the most events per call (up to
        :data:`~.config.AUTO_EVENTS_PER_CALL`) whose batches in flight fit ``options.memory_mb``, by the
        memory the modules declare one event needs in them (summed: a batch's inputs, temporaries and
        products of every module may be alive at once), and that still give every stream a batch of the
        job's ``total`` events (a job of 20 events on 2 streams runs batches of 10, not one of 20). A job whose
        modules are all per event runs one event per call: batches gain per-event modules nothing (a job of no
        module, a copy, goes by chunks)."""
        options = self.config.options
        if options.events_per_call:
            return options.events_per_call
        if self.prototypes and not any(m.columnar for m in self.prototypes.values()):
            return 1
        per_event = sum(m.memory_per_event_mb for m in self.prototypes.values()) or 0.1
        fits = int(options.memory_mb / (per_event * options.streams) + 1e-9)  # 10 / 0.4 is 24.999...
        shared = -(-total // options.streams) if total else AUTO_EVENTS_PER_CALL
        return max(1, min(AUTO_EVENTS_PER_CALL, fits, shared))

    # -- validation ----------------------------------------------------------------------------------
    def _module_type(self, mc: Any) -> type[Module]:
        if mc.label in self._given_types:
            return self._given_types[mc.label]
        try:
            return lookup(mc.type, self.config.folder)
        except KeyError as err:
            raise ConfigError(err.args[0], key=f"modules.{mc.label}.type",
                              **mc.origin(None, self.config.file)) from None

    def _module_params(self, mc: Any) -> dict[str, Any]:
        cls = self.module_types[mc.label]
        try:
            return cls.validate_params(mc.params)
        except ParamError as err:
            if err.problem == "value":  # the reason says what was expected
                reason = err.reason
            else:
                hint = f"; {cls.__name__} takes {err.known}" if err.problem == "unknown" else ""
                reason = f"{err.reason} for module type {cls.__name__}{hint}"
            raise ConfigError(reason, key=f"modules.{mc.label}.{err.name}",
                              **mc.origin(err.name, self.config.file)) from None

    def _output_selection(self) -> tuple[dict[str, str], dict[str, str]]:
        """Product keys and source columns to write, with their branch names (``"key as Branch"`` renames)."""
        product_keys = [k for m in self.prototypes.values() for k in m.produces()]
        products: dict[str, str] = {}
        columns: dict[str, str] = {}
        for entry in self.config.output.products:
            pattern, _, rename = (part.strip() for part in entry.partition(" as "))
            matches = dag.selected(product_keys, [pattern])
            if rename and len(matches) > 1:
                raise ConfigError(f"{entry!r} renames {len(matches)} products; a rename needs exactly one",
                                  file=self.config.file, key="output.products")
            if matches:
                for key in matches:
                    products[key] = rename or branch_name(key)
            elif ":" not in pattern and not any(ch in pattern for ch in "*?["):
                columns[pattern] = rename or pattern
            elif pattern != "*":
                raise ConfigError(f"{pattern!r} matches no product (products: {product_keys})",
                                  file=self.config.file, key="output.products")
        return products, columns

    def _source_requests(self) -> list[Request]:
        merged: dict[str, Request] = {}
        for module in self.prototypes.values():
            for key, tag in module.inputs().items():
                if key not in self.graph.source_keys:
                    continue
                old = merged.get(key)
                fields = tag.fields
                if old is not None and old.fields is not None and fields is not None:
                    fields = tuple(dict.fromkeys(old.fields + fields))
                elif old is not None:
                    fields = old.fields if fields is None else fields
                optional = tag.optional and (old is None or old.optional)
                merged[key] = Request(key, fields, optional)
        for key in self.output_columns:
            merged.setdefault(key, Request(key))
        return list(merged.values())

    def _make_services(self) -> dict[str, Service]:
        wanted = dict(self.config.services)
        wanted.pop("timing", None)
        required = dict.fromkeys(name for module in self.prototypes.values() for name in module.requires)
        for name in required:
            wanted.setdefault(name, {})
        services: dict[str, Service] = {}
        for name, cfg in wanted.items():
            try:
                service = service_class(name)(cfg)  # checked even when unused: a typo fails either way
            except ConfigError as err:
                if err.file or not (err.key or "").startswith("services."):
                    raise
                # a service validates a plain dict: say whether the value came from the file or from -p
                raise ConfigError(err.reason, key=err.key, **self.config.service_origin(err.key)) from None
            if name in required:
                services[name] = service
            else:  # no module may reach it (Module.service needs `requires`): starting it (a server) is waste
                log.info("services.%s: no module of this job uses it; not started", name)
        return services

    # -- running -------------------------------------------------------------------------------------
    def _instantiate_streams(self) -> list[dict[str, Module]]:
        streams: list[dict[str, Module]] = []
        for s in range(self.config.options.streams):
            stream: dict[str, Module] = {}
            for label, proto in self.prototypes.items():
                if s == 0 or type(proto).shared:
                    stream[label] = proto
                else:
                    stream[label] = self.module_types[label](label, self.module_params[label])
            streams.append(stream)
        for stream in streams:
            for module in stream.values():
                module.services = self.services
        return streams

    def metadata(self) -> dict[str, Any]:
        """What is stored in the output file next to the events."""
        return {"software": "sonic-hep", "version": software_version(), "python": sys.version.split()[0],
                "host": socket.gethostname(), "platform": platform.platform(), "created": time.time(),
                "config_file": self.config.file, "config": redact(self.config.raw),
                "inputs": list(getattr(self.source, "files", [])),
                "first_entry": self.config.source.first_entry, "max_events": self.config.source.max_events}

    def provenance(self) -> dict[str, Any]:
        """How the events were made (``provenance.py``): the services' records (inference: per model the
        mode, who answered and the model digest), the events per call and the software versions."""
        record: dict[str, Any] = {"events_per_call": self.events_per_call, "software": software_versions()}
        for name, service in self.services.items():
            section = service.provenance()
            if section is not None:
                record[name] = redact(section)
        return record

    def run(self, timing_json: str | None = None, progress: bool | None = None,
            on_event: Callable[[Event, bool], None] | None = None, keep_histograms: bool = False) -> RunResult:
        """Runs the job. The output file appears (atomically) only if every event was processed.

        The job's four steps, each a method: the outputs are opened (:meth:`_open_outputs`), services
        and modules begin (:meth:`_begin`), events are processed and emitted in input order
        (:meth:`_process` with an :class:`_Emitter`), then the results are written (:meth:`_finish`);
        whatever began ends (:meth:`_end`), also when the job fails.

        Args:
            timing_json: where to write the timing report as JSON (also ``services.timing.json``).
            progress: show a progress bar (default: ``options.progress`` and stderr is a terminal).
            on_event: called with each processed event and whether it passed the filters, in input order,
                on the thread that runs the job (the Python API's in-memory iteration); an exception it
                raises stops the job like a module's.
            keep_histograms: the caller keeps the histograms (``RunResult.histograms``), so a job without
                an output file may fill them.
        """
        outputs = self._open_outputs(timing_json)
        streams = self._instantiate_streams()
        timing = Timing([(label, type(m).__name__, type(m).kind) for label, m in self.prototypes.items()],
                        streams=self.config.options.streams, worker_threads=self.config.options.threads)
        started: list[Any] = []
        events = 0
        emitter = _Emitter(outputs.root, self._progress_bar(progress), on_event)
        histograms: dict[str, Any] = {}
        try:
            self._begin(streams, started, keep_histograms)
            events = self._process(streams, timing, emitter)
            histograms = self._finish(streams, timing, outputs)
        except KeyboardInterrupt as stop:
            outputs.abort()
            signum = getattr(stop, "signum", signal.SIGINT)
            how = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
            # the signal may land after the output got its name (then it is complete: all events are in it)
            outcome = "no output was written" if outputs.path is None else f"the output {outputs.path} is complete"
            raise Interrupted(f"{how} after {emitter.emitted} events; {outcome}", signum) from None
        except BaseException:
            outputs.abort()
            raise
        finally:
            emitter.close()
            self._end(started)
        return RunResult(events=events, written=emitter.written, output=outputs.path, timing=timing,
                         histograms=histograms)

    def _open_outputs(self, timing_json: str | None) -> _Outputs:
        """Checks and creates (under a temporary name) every file the job writes.

        This comes before any server starts or any event is read: a path that cannot be written fails
        now, not after the job.
        """
        cfg = self.config
        timing_json = timing_json or cfg.services.get("timing", {}).get("json")
        reserved = self._reserved_files()
        report = PendingText(timing_json, "timing JSON", reserved) if timing_json else None
        root: RootOutput | None = None
        try:
            if cfg.output.file:
                also = [(report.path, "the timing JSON")] if report is not None else []
                root = RootOutput(cfg.output, self.output_products, self.output_columns,
                                  self.source.id_branches, self.metadata(), expected_events=self.source.total,
                                  inputs=reserved + also)
        except BaseException:
            if report is not None:
                report.abort()
            raise
        return _Outputs(root, report)

    def _begin(self, streams: list[dict[str, Module]], started: list[Any], keep_histograms: bool = False) -> None:
        """Services, then every module instance, begin the job; each one that did goes on ``started``."""
        unique = list({id(m): m for stream in streams for m in stream.values()}.values())
        for service in self.services.values():
            service.begin_job()
            started.append(service)
        for module in unique:
            module.begin_job()
            started.append(module)
        if not keep_histograms:
            self._check_histograms_are_kept()

    def _process(self, streams: list[dict[str, Module]], timing: Timing, emitter: _Emitter) -> int:
        """Every event of the source through the modules; returns how many were processed."""
        options = self.config.options
        scheduler = Scheduler(self.graph, streams, options.threads, timing, options.seed, self.events_per_call)
        timing.events_per_call = self.events_per_call
        timing.start = time.perf_counter()

        def emit(event: Any, passed: bool) -> None:
            timing.first_event_done()  # the clocks after the first event, for a steady CPU per event
            emitter(event, passed)

        events = scheduler.run(self.source.chunks(), emit)
        timing.events = events
        timing.passed = emitter.written
        timing.finish()
        return events

    def _finish(self, streams: list[dict[str, Module]], timing: Timing, outputs: _Outputs) -> dict[str, Any]:
        """The services' reports and the histograms join the outputs, which then get their names; returns
        the histograms."""
        for name, service in self.services.items():
            section = service.report()
            if section:
                timing.add_section(name, section)
        histograms = self._histograms(streams)
        if outputs.root is not None:
            outputs.root.metadata["provenance"] = self.provenance()
            for path, hist in histograms.items():
                try:
                    outputs.root.write_object(path, hist)
                except Exception as err:
                    raise OutputError(f"cannot write histogram {path}: {err}") from None
        outputs.commit(timing)
        return histograms

    @staticmethod
    def _end(started: list[Any]) -> None:
        """``end_job`` of everything that began, the last begun first; a failing one does not stop the rest."""
        for item in reversed(started):
            try:
                item.end_job()
            except Exception as err:  # noqa: BLE001 - report, keep closing the rest
                log.error("end_job of %s failed: %s", getattr(item, "label", item), err)

    def _reserved_files(self) -> list[tuple[str, str]]:
        """Files no output may be: the inputs and the configuration (writing one would destroy it)."""
        reserved = [(path, f"an input file ({path})") for path in getattr(self.source, "files", [])]
        if self.config.file:
            reserved.append((self.config.file, "the configuration file"))
        return reserved

    def _check_histograms_are_kept(self) -> None:
        """Analyzers that fill histograms need an output file, or their work would silently go nowhere."""
        if self.config.output.file:
            return
        filling = [label for label, m in self.prototypes.items()
                   if isinstance(m, Analyzer) and type(m).histograms is not Analyzer.histograms]
        if filling:
            raise ConfigError(f"module(s) {', '.join(filling)} fill histograms, but there is no output file to keep "
                              f"them: give output.file or -o FILE", file=self.config.file, key="output.file")

    def _histograms(self, streams: list[dict[str, Module]]) -> dict[str, Any]:
        """Every Analyzer's histograms summed over its instances, by ``"<label>/<name>"``."""
        totals: dict[str, Any] = {}
        for label, proto in self.prototypes.items():
            if not isinstance(proto, Analyzer):
                continue
            instances = list({id(s[label]): s[label] for s in streams}.values())
            for module in instances:
                for name, hist in module.histograms().items():
                    key = f"{label}/{name}"
                    totals[key] = hist if key not in totals else totals[key] + hist
        return totals

    def _progress_bar(self, progress: bool | None) -> Any:
        show = self.config.options.progress if progress is None else progress
        if not show or not sys.stderr.isatty():
            return None
        from tqdm import tqdm

        return tqdm(total=self.source.total, unit="evt", desc=self.config.name, leave=False)
