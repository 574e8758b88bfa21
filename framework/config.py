"""The process description: YAML (read by :mod:`.yaml_reader`) → validated :class:`ProcessConfig`.

A configuration has these sections (``modules`` is required, unless ``output.products`` names what a job of
no module copies)::

    process: demo                      # a name for reports
    source:  {type: root, files: [in.root], tree: Events, first_entry: 0, max_events: -1, chunk_size: 1000,
              columns: {Jet: {from: Jet, fields: {pt: PT}}}}   # optional: consumed keys → the file's names
    modules:                           # label -> type + parameters, in path order
      ht: {type: JetPtSum, jets: Jet}
    path: [ht]                         # optional: what runs, as a CMSSW path (:mod:`.graph`; default: all)
    output:  {file: out.root, tree: Events, products: ["ht:*"], compression: "zstd:4"}
    services:
      inference: {mode: direct}
    options: {streams: 4, threads: 4, seed: 1}

Every error names the file, the line and the key to fix. Command-line overrides
(``-p ht.jets=FatJet``, ``-p source.chunk_size=500``) are applied to the raw YAML before validation,
so they are checked exactly like the file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import columns
from .errors import ConfigError, did_you_mean
from .settings import Problem, build, limits
from .yaml_reader import COMMAND_LINE, LineDict, load_yaml, mark_command_line, origin, parse_value


#: more worker threads than this is a typo (``options.threads=100000`` failed deep in ``threading``)
MAX_THREADS = 1024
#: each stream holds its own module instances; more than this exhausts memory before it helps
MAX_STREAMS = 4096
#: more events per call than this is a typo: a batch is held in memory whole
MAX_EVENTS_PER_CALL = 1_000_000
#: the most events per call the scheduler chooses by itself: past a few hundred events a call's fixed
#: cost is already spread thin, and larger batches only delay the first output and hold more memory
AUTO_EVENTS_PER_CALL = 500


@dataclass
class SourceConfig:
    """Where events come from.

    ``type: root`` reads TTrees or RNTuples with uproot; ``type: empty`` makes ``events`` events with
    no input columns (for generator modules). ``columns`` maps the keys modules consume onto the file's
    own names (renames, defaults, concatenations, references; :mod:`.columns`), so producers written for
    one schema read another's files."""

    type: str = "root"
    files: list[str] = field(default_factory=list)
    tree: str = "Events"
    first_entry: int = field(default=0, metadata=limits(min=0))
    max_events: int = field(default=-1, metadata=limits(min=-1, hint=" (-1 means all events)"))
    chunk_size: int = field(default=1000, metadata=limits(min=1))
    events: int = field(default=0, metadata=limits(min=0))
    columns: dict[str, Any] = field(default_factory=dict)


@dataclass
class OutputConfig:
    """What is written: products (keys or globs like ``"pnet:*"``, source columns too) to a ROOT file,
    written in chunks under a temporary name and renamed when the job succeeds."""

    file: str | None = None
    tree: str = "Events"
    products: list[str] = field(default_factory=lambda: ["*"])
    compression: str = "zstd:4"
    chunk_size: int = field(default=1000, metadata=limits(min=1))


@dataclass
class Options:
    """How the job runs: batches in flight (streams), worker threads, events per module call, random seed,
    progress bar.

    ``events_per_call`` is how many consecutive events form one batch: a columnar module is called once per
    batch, an inference request carries the batch's objects. 0 lets the scheduler choose it so that the
    batches in flight fit ``memory_mb`` (each module declares the memory one event needs in it); 1 is one
    event per call, CMSSW's granularity.
    """

    streams: int = field(default=1, metadata=limits(min=1, max=MAX_STREAMS))
    threads: int = field(default=1, metadata=limits(min=1, max=MAX_THREADS))
    events_per_call: int = field(default=0, metadata=limits(min=0, max=MAX_EVENTS_PER_CALL,
                                                              hint=" (0 means chosen within memory_mb)"))
    memory_mb: int = field(default=1000, metadata=limits(min=1))
    seed: int = 1
    progress: bool = True


@dataclass
class ModuleConfig:
    """One module: its label, type name and raw parameters (validated against the type later)."""

    label: str
    type: str
    params: dict[str, Any]
    line: int | None = None
    type_overridden: bool = False

    def origin(self, param: str | None, file: str | None) -> dict[str, Any]:
        """``file``/``line`` of an error about this module's type (``param=None``) or one of its parameters."""
        if param is None:
            return {"file": COMMAND_LINE, "line": None} if self.type_overridden else {"file": file, "line": self.line}
        where = origin(self.params, param, file)
        if where["line"] is None and where["file"] == file:
            where["line"] = self.line
        return where


@dataclass
class ProcessConfig:
    """A whole validated process description."""

    name: str
    file: str | None
    source: SourceConfig
    modules: dict[str, ModuleConfig]
    path: list[str]
    output: OutputConfig
    services: dict[str, dict[str, Any]]
    options: Options
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    #: where each ``services.<name>.<key>`` came from (``file``/``line``, or the command line; ``"."``: the
    #: service itself), so that a service's own validation can blame the right place
    service_origins: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict, repr=False)
    #: the user's module files (``imports``), as a job elsewhere imports them (absolute paths when they sit
    #: next to the configuration)
    imports: list[str] = field(default_factory=list)

    @property
    def folder(self) -> str:
        """The configuration's folder, where ``imports`` and ``type: my_analysis.Class`` files are looked for."""
        return os.path.dirname(os.path.abspath(self.file)) if self.file and self.file != COMMAND_LINE else os.getcwd()

    def service_origin(self, key: str) -> dict[str, Any]:
        """``file``/``line`` of a dotted ``services.<name>[.<key>...]`` path (the file, unknown line, if not known)."""
        parts = key.split(".")
        if len(parts) < 2 or parts[0] != "services":
            return {"file": self.file, "line": None}
        known = self.service_origins.get(parts[1], {})
        return known.get(parts[2] if len(parts) > 2 else ".", {"file": self.file, "line": None})


SECTIONS = ("process", "imports", "source", "modules", "path", "output", "services", "options")


def _section(data: dict, name: str, cls: type, file: str | None) -> Any:
    """Section ``name`` of the configuration as ``cls``; a problem names the file, line and ``name.key``."""
    raw = data.get(name) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"must be a mapping, not {type(raw).__name__}", key=name, **origin(data, name, file))

    def error(problem: Problem) -> ConfigError:
        return ConfigError(problem.message, key=f"{name}.{problem.key}", **origin(raw, problem.raw_key, file))

    return build(cls, raw, error=error)


def apply_overrides(data: dict, overrides: list[str], file: str | None = None) -> dict:
    """Applies ``key.path=value`` overrides to the raw configuration (values parsed as YAML).

    A first component that is a module label addresses that module's parameters
    (``pnet.batch_size=64``); otherwise it names a section (``source.max_events=10``,
    ``services.inference.mode=sonic``).
    """
    for override in overrides:
        if "=" not in override:
            raise ConfigError(f"override {override!r} must look like key.path=value", file="<command line>")
        path, _, text = override.partition("=")
        try:
            value = parse_value(text) if text != "" else ""
        except ConfigError as err:
            raise ConfigError(err.reason, file=COMMAND_LINE, key=path) from None
        keys = path.strip().split(".")
        modules = data.get("modules") or {}
        if keys[0] in modules and keys[0] not in SECTIONS:
            keys = ["modules", *keys]
        if keys[0] not in SECTIONS:
            raise ConfigError(f"unknown section or module label {keys[0]!r}"
                              f"{did_you_mean(keys[0], list(SECTIONS) + list(modules))}",
                              file="<command line>", key=path)
        target = data
        for key in keys[:-1]:
            nxt = target.get(key)
            if nxt is None:  # a mapping the command line creates is the command line's
                nxt = target[key] = LineDict()
                nxt.from_command_line = True
                if isinstance(target, LineDict):
                    target.overridden.add(key)
            if not isinstance(nxt, dict):
                raise ConfigError(f"{key!r} is not a mapping", file="<command line>", key=path)
            target = nxt
        target[keys[-1]] = mark_command_line(value)
        if isinstance(target, LineDict):
            target.overridden.add(keys[-1])
    return data


def parse(data: dict, file: str | None = None) -> ProcessConfig:
    """Validates the structure of a raw configuration (module parameters are checked by the process).

    Args:
        data (dict): the parsed YAML (a :class:`LineDict` keeps line numbers for messages).
        file (str | None): the file it came from, for messages.
    """
    for key in data:
        if key not in SECTIONS:
            raise ConfigError(f"unknown section{did_you_mean(str(key), SECTIONS)}; known: {list(SECTIONS)}",
                              key=str(key), **origin(data, key, file))
    raw_modules = data.get("modules") or {}
    if not isinstance(raw_modules, dict):
        raise ConfigError("must map module labels to modules ({label: {type: ..., ...}})", key="modules",
                          **origin(data, "modules", file))
    raw_output = data.get("output")
    if not raw_modules and not (isinstance(raw_output, dict) and raw_output.get("products")):
        # a job of no module only copies: what it copies must be said (the default "*" means products)
        raise ConfigError("no modules to run and no output.products to copy: give modules, or for a skim the "
                          "branches to keep (output: {file: skim.root, products: [Jet, MET_pt]})",
                          key="modules", **origin(data, "modules", file))
    modules: dict[str, ModuleConfig] = {}
    for label, spec in raw_modules.items():
        where = origin(raw_modules, label, file)
        line = where["line"]
        if not isinstance(label, str) or not label.isidentifier():
            raise ConfigError("a module label must be an identifier (letters, digits, _)",
                              key=f"modules.{label}", **where)
        if not isinstance(spec, dict) or "type" not in spec:
            raise ConfigError("a module needs a mapping with 'type' and its parameters",
                              key=f"modules.{label}", **where)
        params = LineDict((k, v) for k, v in spec.items() if k != "type")
        params.lines = {k: n for k, n in getattr(spec, "lines", {}).items() if k != "type"}
        params.overridden = set(getattr(spec, "overridden", ())) - {"type"}
        params.from_command_line = getattr(spec, "from_command_line", False)
        type_where = origin(spec, "type", file)
        modules[label] = ModuleConfig(label=label, type=str(spec["type"]), params=params,
                                      line=type_where["line"] or line,
                                      type_overridden=type_where["file"] == COMMAND_LINE)
    path = data.get("path") or list(modules)
    if not isinstance(path, list):
        raise ConfigError("must be a list of module labels", key="path", **origin(data, "path", file))
    for label in path:
        if not isinstance(label, str):
            raise ConfigError(f"expected module labels, got {type(label).__name__} {label!r}", key="path",
                              **origin(data, "path", file))
        if label not in modules:
            raise ConfigError(f"unknown module label {label!r}{did_you_mean(str(label), modules)}",
                              key="path", **origin(data, "path", file))
    services = data.get("services") or {}
    if not isinstance(services, dict) or any(not isinstance(v, dict) for v in services.values()):
        raise ConfigError("must map service names to mappings", key="services", **origin(data, "services", file))
    _check_timing(services.get("timing") or {}, file)
    source = _section(data, "source", SourceConfig, file)
    output = _section(data, "output", OutputConfig, file)
    options = _section(data, "options", Options, file)
    source.columns = _source_columns(data, file)
    if source.type not in ("root", "empty"):
        raise ConfigError(f"unknown source type {source.type!r}; use 'root' or 'empty'",
                          key="source.type", **origin(data.get("source") or {}, "type", file))
    imports = _user_imports(data, modules, file)
    name = str(data.get("process") or (Path(file).stem if file else "process"))
    service_origins = {str(svc): {".": origin(services, svc, file), **{str(k): origin(spec, k, file) for k in spec}}
                       for svc, spec in services.items()}
    raw = _plain(data)
    if imports:
        raw["imports"] = imports
    return ProcessConfig(name=name, file=file, source=source, modules=modules, path=list(path), output=output,
                         services={k: dict(v) for k, v in services.items()}, options=options, raw=raw,
                         service_origins=service_origins, imports=imports)


def _check_timing(timing: dict, file: str | None) -> None:
    """``services.timing``: ``{json: FILE}`` only (the framework itself reads it; no service class checks it)."""
    for key, value in timing.items():
        if key != "json":
            raise ConfigError(f"unknown key{did_you_mean(str(key), ['json'])}; known: ['json']",
                              key=f"services.timing.{key}", **origin(timing, key, file))
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"expected a file name, got {type(value).__name__} {value!r}",
                              key="services.timing.json", **origin(timing, key, file))


def _source_columns(data: dict, file: str | None) -> dict[str, Any]:
    """``source.columns`` parsed, a malformed entry named by file, line and key (``source.columns.Jet.fields``)."""
    raw_source = data.get("source") or {}
    raw = raw_source.get("columns")
    try:
        return columns.parse(raw)
    except columns.SpecError as err:
        # the deepest mapping on the error's path that holds the next key says where it was written
        where = origin(raw_source, "columns", file)
        node: Any = raw
        for part in re.findall(r"[^.\[\]]+", err.path):
            key: Any = int(part) if isinstance(node, list) and part.isdigit() else part
            if isinstance(node, dict) and key in node:
                where, node = origin(node, key, file), node[key]
            elif isinstance(node, list) and isinstance(key, int) and key < len(node):
                node = node[key]
            else:
                break
        raise ConfigError(err.message, key="source.columns" + (f".{err.path}" if err.path else ""), **where) from None


def _user_imports(data: dict, modules: dict[str, ModuleConfig], file: str | None) -> list[str]:
    """``imports: [my_analysis, lib/cuts.py]``: the user's own module files, imported now so that their classes
    are module types (``type: JetPtSum``); looked for in the configuration's folder, then on PYTHONPATH.
    A ``type: my_analysis.JetPtSum`` whose file sits in that folder joins the list, so a grid job, which
    runs a copy of the configuration from its task folder, finds it too."""
    from .registry import UserModuleError, import_user_modules, user_file

    raw = data.get("imports")
    raw = [] if raw is None else [raw] if isinstance(raw, str) else raw
    where = origin(data, "imports", file)
    if not isinstance(raw, list) or not all(isinstance(name, str) and name.strip() for name in raw):
        raise ConfigError("must be a list of module names or .py files, e.g. imports: [my_analysis]",
                          key="imports", **where)
    folder = os.path.dirname(os.path.abspath(file)) if file and file != COMMAND_LINE else os.getcwd()
    try:
        imports = import_user_modules(list(raw), folder)
    except UserModuleError as err:
        raise ConfigError(str(err), key="imports", **where) from None
    for mc in modules.values():
        found = user_file(mc.type, folder)
        if found and found not in imports:
            imports.append(found)
    return imports


def _plain(value: Any) -> Any:
    """The configuration as plain Python containers (for metadata and job splitting)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def load(path: str | os.PathLike, overrides: list[str] | None = None) -> ProcessConfig:
    """Reads, overrides and validates a configuration file.

    Args:
        path: a YAML file, or the name of a shipped configuration (``"miniaod"`` → ``configs/miniaod.yaml``).
        overrides: ``key.path=value`` strings (see :func:`apply_overrides`).

    Example::

        cfg = load("configs/miniaod.yaml", ["source.max_events=10"])
    """
    path = resolve_config_path(path)
    data = load_yaml(path)
    apply_overrides(data, overrides or [], file=path)
    return parse(data, file=path)


def resolve_config_path(path: str | os.PathLike) -> str:
    """A path as given when it exists; otherwise a shipped configuration of that name."""
    text = str(path)
    if os.path.exists(text):
        return text
    shipped = Path(__file__).resolve().parent.parent / "configs" / (text if text.endswith(".yaml") else text + ".yaml")
    if shipped.exists():
        return str(shipped)
    try:
        import importlib.resources as resources

        candidate = resources.files("sonic_hep.configs") / (text if text.endswith(".yaml") else text + ".yaml")
        if candidate.is_file():
            return str(candidate)
    except (ModuleNotFoundError, TypeError):
        pass
    return text
