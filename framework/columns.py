"""Column mapping: what the modules consume, built from another file's names (``source.columns``).

Producers declare the columns they read in one schema (NanoAOD/MiniAOD: ``Jet`` with ``pt, eta, phi``,
``PFCands`` with 18 fields, ``JetPFCands`` index pairs). A file written by other software (Delphes,
bacon, an ATLAS PHYSLITE file) stores the same physics under other names. Rather than a converter
written in code, the configuration says where each consumed column comes from, and the source builds
it while reading, vectorised over a chunk::

    source:
      columns:
        MET_pt: {from: MissingET.MET, first: true, default: .nan}   # alias; first object; default
        El_pt: "AnalysisElectronsAuxDyn:pt"        # any name, ':' included (or quote it: `AnalysisElectronsAuxDyn:pt`)
        Jet:                                       # a collection from a split object, fields renamed
          from: Jet
          fields: {pt: PT, eta: Eta, phi: Phi, mass: Mass, dz: {from: DZ, scale: 0.1}}   # mm → cm
          defaults: {area: 0.5}                    # a field the file lacks: the same value for every object
        Muon: {fields: {pt: mu_pt, eta: mu_eta}}   # a collection from separately stored branches
        PFCands:                                   # one collection from several, one after another per event
          concat: [{from: EFlowTrack, fields: {pt: PT}}, {from: EFlowPhoton, fields: {pt: ET}, defaults: {pdgId: 22}}]
          defaults: {puppiWeight: 1.0}
        JetPFCands:                                # references (TRefArray) → NanoAOD-style index pairs
          references: Jet.Constituents
          targets: [EFlowTrack, EFlowPhoton]       # in the order the candidates are concatenated
          index_fields: [jetIdx, pFCandsIdx]
        SV: {empty: true}                          # a collection the file does not have: no objects
        FatJet: {one_of: [{from: FatJet}, {empty: true}]}   # the first alternative the file has

A column the configuration does not map is looked up under its own name (see :mod:`.names`); a name with
``:`` (which in a module's input means ``label:product``) is written between backquotes.
:func:`parse` checks a mapping's shape when the configuration is read; :func:`plan` resolves it against
one file's :class:`~.names.Catalog` into :class:`Column` builders that :meth:`Column.build` runs per chunk.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import awkward as ak
import numpy as np

from .errors import SourceError, did_you_mean
from .names import Catalog, Leaf
from .references import resolve

log = logging.getLogger(__name__)

#: the keys a mapping entry may have
KEYS = ("from", "fields", "defaults", "default", "first", "concat", "references", "targets", "id_field",
        "index_fields", "one_of", "empty")

_NUMBER = (int, float, bool)


class SpecError(ValueError):
    """A malformed ``source.columns`` entry: ``path`` is the key under ``source.columns`` (``Jet.fields``)."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path, self.message = path, message


class NotInFile(SourceError):
    """A name a mapping (or a module) asks for is not in the file; ``one_of`` tries its next alternative."""


@dataclass(frozen=True)
class Spec:
    """One parsed ``source.columns`` entry (see the module docstring for the meaning of each key)."""

    source: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    #: fields whose values are multiplied by a factor (units: Delphes' mm → CMS's cm is 0.1)
    scales: dict[str, float] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    default: Any = None
    first: bool = False
    concat: tuple[Spec, ...] = ()
    references: str | None = None
    targets: tuple[str, ...] = ()
    id_field: str = "fUniqueID"
    index_fields: tuple[str, ...] = ()
    one_of: tuple[Spec, ...] = ()
    empty: bool = False


def _name(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(path, f"must be a name in the file (a non-empty string), not {value!r}")
    return value


def _number(value: Any, path: str) -> Any:
    if not isinstance(value, _NUMBER):
        raise SpecError(path, f"a default must be a number or true/false, not {value!r}")
    return value


def _names(value: Any, path: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise SpecError(path, f"must be a list of names, not {value!r}")
    return tuple(_name(v, f"{path}[{i}]") for i, v in enumerate(value))


def parse_spec(raw: Any, path: str) -> Spec:
    """One entry: a name (an alias) or a mapping with the keys in :data:`KEYS`."""
    if isinstance(raw, str):
        return Spec(source=_name(raw, path))
    if not isinstance(raw, Mapping):
        raise SpecError(path, f"must be a name in the file or a mapping with keys {list(KEYS)}, not {raw!r}")
    unknown = [k for k in raw if k not in KEYS]
    if unknown:
        raise SpecError(f"{path}.{unknown[0]}",
                        f"unknown key{did_you_mean(str(unknown[0]), KEYS)}; known: {list(KEYS)}")
    kinds = [k for k in ("concat", "references", "one_of", "empty") if k in raw]
    if len(kinds) > 1:
        raise SpecError(path, f"{kinds[0]!r} and {kinds[1]!r} cannot be combined: give one way to build the column")
    fields = raw.get("fields") or {}
    if not isinstance(fields, Mapping):
        raise SpecError(f"{path}.fields", f"must map field names to names in the file, not {fields!r}")
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise SpecError(f"{path}.defaults", f"must map field names to values, not {defaults!r}")
    names: dict[str, str] = {}
    scales: dict[str, float] = {}
    for k, v in fields.items():
        where = f"{path}.fields.{k}"
        if isinstance(v, Mapping):  # {from: NAME, scale: FACTOR}
            extra = [x for x in v if x not in ("from", "scale")]
            if extra or "from" not in v:
                raise SpecError(where, f"a field is a name in the file or {{from: NAME, scale: FACTOR}}, "
                                       f"not {dict(v)!r}")
            if "scale" in v:
                scales[str(k)] = float(_number(v["scale"], f"{where}.scale"))
            v = v["from"]
        names[str(k)] = _name(v, where)
    spec = Spec(
        source=_name(raw["from"], f"{path}.from") if "from" in raw else None,
        fields=names,
        scales=scales,
        defaults={str(k): _number(v, f"{path}.defaults.{k}") for k, v in defaults.items()},
        default=_number(raw["default"], f"{path}.default") if "default" in raw else None,
        first=bool(raw.get("first", False)),
        concat=tuple(parse_spec(p, f"{path}.concat[{i}]") for i, p in enumerate(_list(raw, "concat", path))),
        references=_name(raw["references"], f"{path}.references") if "references" in raw else None,
        targets=_names(raw["targets"], f"{path}.targets") if "targets" in raw else (),
        id_field=_name(raw.get("id_field", "fUniqueID"), f"{path}.id_field"),
        index_fields=_names(raw["index_fields"], f"{path}.index_fields") if "index_fields" in raw else (),
        one_of=tuple(parse_spec(p, f"{path}.one_of[{i}]") for i, p in enumerate(_list(raw, "one_of", path))),
        empty=bool(raw.get("empty", False)),
    )
    if spec.references is not None and (not spec.targets or len(spec.index_fields) != 2):
        raise SpecError(path, "references need 'targets' (the collections referred to) and 'index_fields' "
                              "(two names: the referring object's index, the target's index)")
    if (spec.targets or spec.index_fields) and spec.references is None:
        raise SpecError(path, "'targets' and 'index_fields' belong to 'references'")
    if "empty" in raw and not spec.empty:
        raise SpecError(f"{path}.empty", "only 'empty: true' means something; leave the key out otherwise")
    return spec


def _list(raw: Mapping, key: str, path: str) -> list:
    if key not in raw:
        return []
    value = raw[key]
    if not isinstance(value, list) or not value:
        raise SpecError(f"{path}.{key}", f"must be a non-empty list, not {value!r}")
    return value


def parse(raw: Any) -> dict[str, Spec]:
    """``source.columns`` checked and parsed: column key → :class:`Spec` (``SpecError`` names the entry)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise SpecError("", f"must map column names to where they come from, not {raw!r}")
    specs: dict[str, Spec] = {}
    for key, value in raw.items():
        if isinstance(value, Spec):  # already parsed (a SourceConfig built twice)
            specs[str(key)] = value
            continue
        specs[str(key)] = parse_spec(value, str(key))
    return specs


# -- builders -------------------------------------------------------------------------------------------
class Column:
    """How one consumed key is made from the leaves read for a chunk."""

    #: the leaves it needs read
    leaves: tuple[Leaf, ...] = ()

    def build(self, values: Mapping[str, Any], length: int) -> Any:
        """The chunk's array for this key; ``values`` maps ``Leaf.read`` to the read (navigated) array."""
        raise NotImplementedError


@dataclass
class Plain(Column):
    """A column read as it is (a branch, a leaf of a split object, an RNTuple field or record)."""

    leaf: Leaf
    first: bool = False
    default: Any = None

    def __post_init__(self) -> None:
        self.leaves = (self.leaf,)

    def build(self, values: Mapping[str, Any], length: int) -> Any:
        array = values[self.leaf.read]
        if self.first and array.ndim > 1:  # a one-object collection (Delphes MissingET) as a per-event value
            firsts = ak.firsts(array, axis=1)
            return ak.fill_none(firsts, np.nan if self.default is None else self.default)
        return array


@dataclass
class Constant(Column):
    """The same value in every event (a column the file lacks, given a default)."""

    value: Any

    def build(self, values: Mapping[str, Any], length: int) -> Any:
        return np.full(length, self.value)


@dataclass
class Record(Column):
    """A collection: fields from leaves (zipped into records, a view of the buffers) or defaults."""

    key: str
    fields: dict[str, Leaf | Scaled | Default]

    def __post_init__(self) -> None:
        self.leaves = tuple(v.leaf if isinstance(v, Scaled) else v for v in self.fields.values()
                            if not isinstance(v, Default))

    def build(self, values: Mapping[str, Any], length: int) -> Any:
        read = {name: values[v.read] if isinstance(v, Leaf) else values[v.leaf.read] * v.factor
                for name, v in self.fields.items() if not isinstance(v, Default)}
        template = next(iter(read.values()))
        depth = min(array.ndim for array in read.values())
        arrays: dict[str, Any] = {}
        for name, spec in self.fields.items():
            if isinstance(spec, Default):
                arrays[name] = spec.like(template, depth)
            else:
                arrays[name] = read[name]
        try:
            return ak.zip(arrays, depth_limit=min(depth, 2))
        except ValueError as err:
            raise SourceError(f"collection {self.key!r}: fields have different lengths per event: {err}") from None


@dataclass(frozen=True)
class Scaled:
    """A field read from ``leaf`` and multiplied by ``factor`` (a unit conversion)."""

    leaf: Leaf
    factor: float


@dataclass(frozen=True)
class Default:
    """A field the file lacks: ``value`` for every object."""

    value: Any

    def like(self, template: Any, depth: int) -> Any:
        """An array of ``value`` with ``template``'s objects (per event when ``depth`` is 1)."""
        dtype = np.asarray(self.value).dtype
        if depth < 2:
            return np.full(len(template), self.value, dtype=dtype)
        counts = ak.to_numpy(ak.num(template, axis=1))
        return ak.unflatten(np.full(int(counts.sum()), self.value, dtype=dtype), counts)


@dataclass
class Concat(Column):
    """One collection from several, per event one after another (Delphes' three EFlow collections)."""

    parts: tuple[Record, ...]

    def __post_init__(self) -> None:
        self.leaves = tuple(leaf for part in self.parts for leaf in part.leaves)

    def build(self, values: Mapping[str, Any], length: int) -> Any:
        return ak.concatenate([part.build(values, length) for part in self.parts], axis=1)


@dataclass
class Empty(Column):
    """A collection the file does not have: every event has no objects, with the fields asked for."""

    fields: tuple[str, ...]

    def build(self, values: Mapping[str, Any], length: int) -> Any:
        counts = np.zeros(length, dtype=np.int64)
        if not self.fields:
            return ak.unflatten(np.zeros(0, dtype=np.float32), counts)
        return ak.zip({name: ak.unflatten(np.zeros(0, dtype=np.float32), counts) for name in self.fields})


@dataclass
class References(Column):
    """NanoAOD-style index pairs from references by unique ID (see :mod:`.references`)."""

    key: str
    refs: Leaf
    targets: tuple[Leaf, ...]
    index_fields: tuple[str, str]
    file: str = ""
    _warned: bool = False

    def __post_init__(self) -> None:
        self.leaves = (self.refs, *self.targets)

    def build(self, values: Mapping[str, Any], length: int) -> Any:
        refs = values[self.refs.read]
        if "refs" in ak.fields(refs):  # uproot reads a TRefArray as a record; its IDs are in `refs`
            refs = refs["refs"]
        ids = ak.concatenate([values[t.read] for t in self.targets], axis=1)
        owner, target, missing = resolve(refs, ids)
        if missing and not self._warned:
            self._warned = True
            log.warning("%s: %d references of %r in %s point to no object of %s; they are left out", self.key,
                        missing, self.refs.name, self.file, [t.name for t in self.targets])
        return ak.zip({self.index_fields[0]: owner, self.index_fields[1]: target})


# -- planning -------------------------------------------------------------------------------------------
def _where(catalog: Catalog, file: str) -> str:
    return f"{file!r} (tree {catalog.tree.name!r})" if hasattr(catalog.tree, "name") else repr(file)


def _members_of(catalog: Catalog, name: str, key: str, file: str) -> dict[str, Leaf]:
    members = catalog.members(name)
    if members is None:
        _not_a_collection(catalog, name, key, file)
        raise NotInFile(f"collection {name!r} (for {key!r}) is not in {_where(catalog, file)}"
                        f"{catalog.suggest(name)}")
    return members


def _not_a_collection(catalog: Catalog, name: str, key: str, file: str) -> None:
    """Raises when ``name`` is in the file as one column, which has no fields to make a collection of."""
    leaf = catalog.leaf(name)
    if leaf is not None:
        raise NotInFile(f"{name!r} (for {key!r}) is one column of {_where(catalog, file)}, of type "
                        f"{catalog.typename(leaf)!r}, not a collection with fields: consume it as a column")


def _record(key: str, spec: Spec, fields: tuple[str, ...] | None, catalog: Catalog, file: str,
            defaults: Mapping[str, Any]) -> Record:
    """A collection from ``spec.source``'s members (renamed by ``spec.fields``) or absolute names."""
    members = _members_of(catalog, spec.source, key, file) if spec.source else {}
    defaults = {**defaults, **spec.defaults}
    wanted = fields if fields is not None else tuple(dict.fromkeys([*members, *spec.fields, *defaults]))
    out: dict[str, Leaf | Scaled | Default] = {}
    for name in wanted:
        source = spec.fields.get(name, name)
        leaf = members.get(source)
        if leaf is None and name in spec.fields:  # an explicit name: a leaf anywhere in the file
            leaf = catalog.leaf(source)
        if leaf is not None:
            out[name] = Scaled(leaf, spec.scales[name]) if name in spec.scales else leaf
        elif name in defaults:
            out[name] = Default(defaults[name])
        elif fields is None:
            continue
        else:
            where = f"collection {spec.source!r}" if spec.source else _where(catalog, file)
            have = _suggest_field(source, members) if members else catalog.suggest(source)
            raise NotInFile(f"field {name!r} of {key!r}: {source!r} is not in {where}{have}; map it or give a "
                            f"default in source.columns.{key}")
    if fields is None:  # the whole object: leaves uproot cannot read (empty TObject bases...) are left out
        skipped = [n for n, v in out.items() if isinstance(v, Leaf) and catalog.unreadable(v)]
        if skipped:
            out = {n: v for n, v in out.items() if n not in skipped}
            if not out:
                raise SourceError(f"{key!r} in {file!r}: uproot can read none of its leaves {skipped} "
                                  f"(types {sorted({catalog.typename(members[n]) for n in skipped if n in members})})")
            log.info("%s in %s: leaves uproot cannot read are left out of the record: %s", key, file, skipped)
    if out and all(isinstance(v, Default) for v in out.values()):
        raise SourceError(f"collection {key!r}: none of its fields {sorted(out)} comes from {_where(catalog, file)}, "
                          f"so the number of objects is unknown; map at least one field to a branch "
                          f"(or use 'empty: true') in source.columns.{key}")
    return Record(key, out)


def _suggest_field(name: str, members: Mapping[str, Leaf]) -> str:
    """`` (did you mean 'PT'?; it has N fields)``: a spelling differing only in case first (Delphes' PT)."""
    same = [m for m in members if m.lower() == name.lower()]
    hint = " (did you mean " + " or ".join(map(repr, same)) + "?)" if same else did_you_mean(name, members)
    return f"{hint[:-1]}; it has {len(members)} fields)" if hint else f" (it has {sorted(members)[:20]})"


def _from_spec(key: str, spec: Spec, fields: tuple[str, ...] | None, catalog: Catalog, file: str) -> Column:
    if spec.one_of:
        reasons = []
        for alternative in spec.one_of:
            try:
                return _from_spec(key, alternative, fields, catalog, file)
            except NotInFile as err:
                reasons.append(str(err))
        raise NotInFile(f"no alternative of source.columns.{key}.one_of is in the file: " + "; ".join(reasons))
    if spec.empty:
        return Empty(tuple(fields or ()))
    if spec.concat:
        return Concat(tuple(_record(key, part, fields, catalog, file, spec.defaults) for part in spec.concat))
    if spec.references is not None:
        refs = catalog.leaf(spec.references)
        if refs is None:
            raise NotInFile(f"references {spec.references!r} (for {key!r}) are not in {_where(catalog, file)}"
                            f"{catalog.suggest(spec.references)}")
        targets = []
        for target in spec.targets:
            members = _members_of(catalog, target, key, file)
            if spec.id_field not in members:
                raise NotInFile(f"collection {target!r} (for {key!r}) has no {spec.id_field!r} to match references "
                                f"by (it has {sorted(members)}); set id_field")
            targets.append(members[spec.id_field])
        return References(key, refs, tuple(targets), spec.index_fields, file)  # type: ignore[arg-type]
    if fields is None and not spec.fields and not spec.defaults:  # a single column: an alias, maybe a default
        leaf = catalog.leaf(spec.source) if spec.source else None
        if leaf is not None:
            return Plain(leaf, spec.first, spec.default)
        if spec.source and catalog.members(spec.source) is not None:
            return _record(key, spec, None, catalog, file, {})
        if spec.default is not None:
            return Constant(spec.default)
        raise NotInFile(f"{spec.source!r} (for {key!r}) is not in {_where(catalog, file)}"
                        f"{catalog.suggest(spec.source or key)}")
    return _record(key, spec, fields, catalog, file, {})


def plan(key: str, spec: Spec | None, fields: tuple[str, ...] | None, catalog: Catalog, file: str) -> Column:
    """The builder of consumed ``key`` (a collection when ``fields`` is given) for one file.

    Without a mapping the key is looked up under its own name: a column (full path, short name), or a
    collection (a split object's or RNTuple record's leaves, else NanoAOD's ``<key>_<field>`` branches).

    Raises:
        NotInFile: a name is not in the file (the message names it, the file, and close names).
    """
    if spec is not None:
        return _from_spec(key, spec, fields, catalog, file)
    if fields is None:
        leaf = catalog.leaf(key)
        if leaf is not None:
            return Plain(leaf)
        if catalog.members(key) is not None:
            return _record(key, Spec(source=key), None, catalog, file, {})
        raise NotInFile(f"branch {key!r} is not in {_where(catalog, file)}{catalog.suggest(key)}")
    members = catalog.members(key)
    if members is None:
        _not_a_collection(catalog, key, key, file)
        missing = f"{key}_{fields[0]}" if fields else key
        raise NotInFile(f"branch {missing!r} is not in {_where(catalog, file)}{catalog.suggest(missing)}")
    return _record(key, Spec(source=key), fields, catalog, file, {})
