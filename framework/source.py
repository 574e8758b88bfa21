"""Sources of events: ROOT files read in chunks with uproot, or an empty source for generators.

Only the columns that modules consume are read. A consumed key resolves, per file, to

* a column under any name the file shows it by: a branch (``Jet_pt``, ``MET_pt``), a split object's leaf
  by its short name or full path (``Jet.PT``, ``Jet/Jet.PT``), an RNTuple sub-field
  (``my_struct.sub_struct.i``), or STL containers and objects uproot can read;
* a collection: ``Jet`` with fields ``(pt, eta)`` reads NanoAOD's ``Jet_pt`` and ``Jet_eta``, or a split
  object's / RNTuple record's leaves, and zips them into records (a view of the buffers, not a copy);
* whatever ``source.columns`` maps it to (renames, defaults, concatenations, references: :mod:`.columns`).

Names are resolved by :mod:`.names`; every name is checked against every file before the first event,
so a missing name is named as such (with close names), a type uproot cannot read names branch and type,
and only bytes uproot cannot decode are reported as a read error, with the entry range that failed.

Entries are read ``chunk_size`` at a time, the next chunk prefetched on a background thread, so
memory stays bounded by a few chunks whatever the file size. ``first_entry``/``max_events`` count
over the concatenation of all files, like cmsRun's skipEvents/maxEvents, which is what job
splitting uses.
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import awkward as ak
import numpy as np
import uproot

from . import remote, uproot_errors
from .columns import Column, NotInFile, Spec
from .columns import parse as parse_columns
from .columns import plan as plan_column
from .config import SourceConfig
from .errors import SourceError, did_you_mean
from .event import Chunk
from .names import Catalog, Leaf

log = logging.getLogger(__name__)

ID_BRANCHES = ("run", "luminosityBlock", "event")


@dataclass(frozen=True)
class Request:
    """A key the modules consume: ``fields`` for a collection, ``optional`` if it may be absent."""

    key: str
    fields: tuple[str, ...] | None = None
    optional: bool = False


def expand(paths: list[str]) -> list[str]:
    """Expands globs (sorted, so jobs see a stable order) and keeps URLs as they are."""
    files: list[str] = []
    for path in paths:
        if "://" in path:  # root://, https://, s3://, file:// ... are uproot's (fsspec's) business
            files.append(path)
            continue
        matches = sorted(glob.glob(path)) if glob.has_magic(path) else [path]
        if not matches:
            raise SourceError(f"no input file matches {path!r}")
        files += matches
    return files


def open_file(path: str) -> Any:
    """Opens one input file with uproot: the one place a file is opened (remote access plugs in here)."""
    if not remote.exists(path):  # remote files: retried reads, one clear error (framework/remote.py)
        raise SourceError(f"input file {path!r} does not exist")
    try:
        # local files through the memory map: no I/O thread, and the fastest reader uproot has
        options = {} if "://" in path else {"handler": uproot.source.file.MemmapSource}
        return uproot.open(path, **options)
    except remote.RemoteReadError as err:  # the network, not the file: one line of ours, kept whole
        raise SourceError(f"cannot open {path!r} as a ROOT file: {type(err).__name__}: {err}") from None
    except Exception as err:  # uproot raises many types for a file that is not ROOT
        raise SourceError(f"cannot open {path!r} as a ROOT file: {uproot_errors.reason(err, path)}") from None


def open_tree(path: str, tree: str) -> Any:
    """The TTree or RNTuple ``tree`` of file ``path`` (a missing one is named, with the file's keys)."""
    handle = open_file(path)
    try:
        classname = handle.classname_of(tree)
    except uproot.KeyInFileError:
        keys = [k.split(";")[0] for k in handle.keys(recursive=False)]
        raise SourceError(f"{path!r} has no tree or RNTuple {tree!r}{did_you_mean(tree, keys)}; "
                          f"it holds {keys}") from None
    if not _is_tree(classname):  # a histogram, or an object uproot would try (and maybe fail) to decode
        trees = [k.split(";")[0] for k, c in handle.classnames().items() if _is_tree(c)]
        raise SourceError(f"{tree!r} in {path!r} is a {classname}, not a TTree or RNTuple; "
                          f"give source.tree one of {trees}")
    try:
        return handle[tree]
    except Exception as err:
        raise SourceError(f"cannot read {tree!r} in {path!r} (corrupt file?): "
                          f"{uproot_errors.reason(err, f'{tree!r} in {path!r}')}") from None


def _is_tree(classname: str) -> bool:
    """Whether a stored object of class ``classname`` is one the source reads events from."""
    return classname in ("TTree", "TNtuple", "TNtupleD") or classname.endswith("RNTuple")


@dataclass
class Plan:
    """How one file's tree gives the consumed keys: a builder per key and the leaves to read."""

    catalog: Catalog
    columns: dict[str, Column]
    leaves: list[Leaf]
    #: event-identity leaves present in this file, by their ID_BRANCHES name
    ids: dict[str, Leaf]


def _plan(tree: Any, requests: list[Request], mapping: dict[str, Spec], path: str) -> Plan:
    """For one file: the builder of each request, checked against the file's names and types."""
    catalog = Catalog(tree)
    columns: dict[str, Column] = {}
    for req in requests:
        try:
            columns[req.key] = plan_column(req.key, mapping.get(req.key), req.fields, catalog, path)
        except NotInFile as err:
            if req.optional:  # said, since a present collection with other field names is skipped too
                log.info("optional %r is not read from %s: %s", req.key, path, err)
                continue
            raise
    leaves: dict[str, Leaf] = {}
    for column in columns.values():
        for leaf in column.leaves:
            leaves.setdefault(leaf.read, leaf)
    ids = {name: leaf for name in ID_BRANCHES if (leaf := catalog.leaf(name)) is not None}
    for leaf in ids.values():
        leaves.setdefault(leaf.read, leaf)
    for leaf in leaves.values():
        if catalog.unreadable(leaf):
            raise SourceError(catalog.unreadable_error(leaf, path))
    return Plan(catalog, columns, list(leaves.values()), ids)


class RootSource:
    """Reads events from ROOT files (TTree or RNTuple) with uproot.

    Args:
        config (SourceConfig): files, tree, entry range, chunk size.
        requests (list[Request]): what the modules consume from the source.
    """

    def __init__(self, config: SourceConfig, requests: list[Request]):
        self.config = config
        self.requests = requests
        self.mapping: dict[str, Spec] = parse_columns(config.columns)
        self.files = expand(config.files)
        if not self.files:
            raise SourceError("no input files: give source.files in the configuration or --input")
        self._open: tuple[str, Any, Plan] | None = None
        self.entries = [self._num_entries(path) for path in self.files]
        self._check_range()
        #: event-identity branches every chunk carries (present in the first file)
        self.id_branches = list(self._tree(self.files[0])[1].ids)

    def _tree(self, path: str) -> tuple[Any, Plan]:
        """The tree of ``path`` with its plan, kept open while consecutive chunks come from it
        (reading a TTree's metadata costs as much as a chunk of data for NanoAOD-sized trees)."""
        if self._open is None or self._open[0] != path:
            if self._open is not None:
                self._open[1].file.close()
            tree = open_tree(path, self.config.tree)
            self._open = (path, tree, _plan(tree, self.requests, self.mapping, path))
        return self._open[1], self._open[2]

    def _num_entries(self, path: str) -> int:
        tree, _ = self._tree(path)  # also fails early on a missing branch, naming the file
        return int(tree.num_entries)

    def _check_range(self) -> None:
        """A first entry past the end is a mistake (a job would run and write an empty output), not 0 events."""
        first, total = self.config.first_entry, sum(self.entries)
        if first < 0:
            raise SourceError(f"source.first_entry must be at least 0, got {first}")
        if first > 0 and first >= total:
            if len(self.files) == 1:
                what = f"{self.files[0]!r} has {total} entries"
            else:
                shown = ", ".join(f"{os.path.basename(p)}: {n}" for p, n in list(zip(self.files, self.entries))[:5])
                more = ", ..." if len(self.files) > 5 else ""
                what = f"the {len(self.files)} input files have {total} entries ({shown}{more})"
            raise SourceError(f"source.first_entry {first} is past the end of the input: {what} "
                              f"(entries are numbered from 0 over all files)")

    @property
    def total(self) -> int:
        """Events this source will deliver (after first_entry/max_events)."""
        available = max(0, sum(self.entries) - self.config.first_entry)
        return available if self.config.max_events < 0 else min(available, self.config.max_events)

    def ranges(self) -> Iterator[tuple[str, int, int, int]]:
        """(file, entry_start, entry_stop, first_index) of each file's part of the job's entry range."""
        skip, remaining, index = self.config.first_entry, self.total, 0
        for path, n in zip(self.files, self.entries):
            if remaining <= 0:
                return
            if skip >= n:
                skip -= n
                continue
            start, stop = skip, min(n, skip + remaining)
            skip = 0
            yield path, start, stop, index
            index += stop - start
            remaining -= stop - start

    def _file_chunks(self, path: str, start: int, stop: int, first_index: int) -> Iterator[Chunk]:
        """One file's entries ``[start, stop)`` in chunks, through uproot's ``iterate``.

        ``iterate`` keeps the baskets that straddle a chunk boundary for the next chunk; reading each chunk
        with its own ``arrays`` call decompresses those baskets twice (measured: 1.6× the read time).
        Leaves are asked for by their exact name (a TTree branch's full path, an RNTuple field's dotted
        name), so ``Jet/Jet.PT`` comes back as that key, not as uproot's short name.
        """
        tree, plan = self._tree(path)
        step = self.config.chunk_size
        if plan.leaves:
            reads = list(dict.fromkeys(leaf.fetch for leaf in plan.leaves))
            options: dict[str, Any] = {"expressions": reads}
        else:  # nothing to read: the report still gives each chunk's entry range
            options = {"filter_name": []}
        batches = tree.iterate(**options, step_size=step, entry_start=start, entry_stop=stop, library="ak",
                               how=dict, report=True)
        entry = start
        while entry < stop:
            try:
                item = next(batches, None)
            except remote.RemoteReadError: raise  # noqa: E701 - the network, not the file: already one line naming it
            except Exception as err:  # uproot's many exception types for bytes it cannot decode
                raise SourceError(self._read_error(tree, plan, path, entry, min(stop, entry + step), err)) from None
            if item is None:
                return
            arrays, report = item
            first, entry = report.tree_entry_start, report.tree_entry_stop
            yield self._chunk(path, arrays, plan, first, entry - first, first_index + first - start)

    @staticmethod
    def _read_error(tree: Any, plan: Plan, path: str, lo: int, hi: int, err: Exception) -> str:
        """The message for a failed read of entries ``[lo, hi)``: the culprit leaf when one alone fails, and
        whether it is its type (another range fails too: uproot cannot decode it, e.g. ``std::bitset``) or
        these entries' bytes (the rest of the file reads)."""
        for fetch, leaf in {leaf.fetch: leaf for leaf in plan.leaves}.items():
            try:
                tree.arrays([fetch], entry_start=lo, entry_stop=hi, library="ak")
            except Exception as single:  # noqa: BLE001 - finding which leaf uproot cannot read
                name = leaf.name if leaf.branch is None else fetch.split("/")[-1]
                what = f"branch {name!r} (type {plan.catalog.typename(leaf)!r})"
                why = uproot_errors.reason(single, f"branch {name!r} of {path!r}")
                probe = (0, 1) if lo > 0 else (hi, hi + 1) if hi < tree.num_entries else None
                if probe is None:
                    return (f"cannot read {what} at entries {lo} to {hi - 1} of {path!r} (undecodable type or "
                            f"damaged bytes): {why}")
                try:
                    tree.arrays([fetch], entry_start=probe[0], entry_stop=probe[1], library="ak")
                except Exception:  # noqa: BLE001 - it fails elsewhere too: the type, not these bytes
                    return f"uproot cannot decode {what} in {path!r}: {why}"
                return f"cannot read {what} at entries {lo} to {hi - 1} of {path!r} (damaged bytes?): {why}"
        return (f"cannot read entries {lo} to {hi - 1} of {path!r} (corrupt file?): "
                f"{uproot_errors.reason(err, f'entries {lo} to {hi - 1} of {path!r}')}")

    @staticmethod
    def _chunk(path: str, arrays: dict[str, Any], plan: Plan, entry: int, length: int,
               first_index: int) -> Chunk:
        """Builds a chunk's columns (collections zipped into records, views of the read buffers)."""
        values: dict[str, Any] = {}
        for leaf in plan.leaves:
            array = arrays[leaf.top]
            for name in leaf.path:  # an RNTuple sub-field comes back inside its top-level record
                array = array[name]
            values[leaf.read] = array
        columns = {key: column.build(values, length) for key, column in plan.columns.items()}
        ids = {name: ak.to_numpy(values[leaf.read]) for name, leaf in plan.ids.items()}
        return Chunk(columns=columns, file=path, entry_start=entry, length=length, first_index=first_index, ids=ids)

    def _all_chunks(self) -> Iterator[Chunk]:
        for rng in self.ranges():
            yield from self._file_chunks(*rng)

    def chunks(self) -> Iterator[Chunk]:
        """Chunks in order, the next one read on a background thread while this one is processed.

        The pool is shut down without waiting when this generator is closed: an abandoned generator may be
        finalised on any thread (even uproot's I/O thread), and waiting there for a read would deadlock.
        """
        reader = self._all_chunks()
        pool = ThreadPoolExecutor(1, thread_name_prefix="source")
        try:
            pending = pool.submit(next, reader, None)
            while (chunk := pending.result()) is not None:
                pending = pool.submit(next, reader, None)
                yield chunk
        finally:
            pool.shutdown(wait=False, cancel_futures=True)


class EmptySource:
    """Makes ``events`` events with no input columns, for modules that generate their own data."""

    def __init__(self, config: SourceConfig, requests: list[Request]):
        needed = [r.key for r in requests if not r.optional]
        if needed:
            raise SourceError(f"the empty source has no columns, but modules consume {needed}")
        if config.first_entry < 0 or (config.first_entry > 0 and config.first_entry >= config.events):
            raise SourceError(f"source.first_entry {config.first_entry} is outside the empty source's "
                              f"{config.events} events (source.events)")
        self.config = config
        self.files = ["<empty>"]
        self.id_branches = ["event"]

    @property
    def total(self) -> int:
        """Events after first_entry, at most max_events (-1: all)."""
        available = max(0, self.config.events - self.config.first_entry)
        return available if self.config.max_events < 0 else min(available, self.config.max_events)

    def chunks(self) -> Iterator[Chunk]:
        step = self.config.chunk_size
        first = self.config.first_entry
        for lo in range(0, self.total, step):
            hi = min(lo + step, self.total)
            yield Chunk(columns={}, file="<empty>", entry_start=first + lo, length=hi - lo, first_index=lo,
                        ids={"event": np.arange(first + lo, first + hi) + 1})


class ColumnSource:
    """Serves columns held in memory (``{key: one entry per event}``) as a job's source, ``chunk_size`` events
    at a time. Made only from Python (:func:`~.testing.run_modules` passes it to the process), never by a
    configuration: a test bench's input, so the modules run under the real scheduler without a file.

    Args:
        config (SourceConfig): its entry range and chunk size (files and tree are not used).
        requests (list[Request]): what the modules consume; each one not optional must be among ``columns``.
        columns: the events' columns by key (an awkward array of records for a collection, a numpy array for
            a branch, or an upstream product's values), all of the same length.
    """

    def __init__(self, config: SourceConfig, requests: list[Request], columns: dict[str, Any]):
        lengths = {key: len(values) for key, values in columns.items()}
        if len(set(lengths.values())) > 1:
            raise SourceError(f"the given columns have different numbers of events: {lengths}")
        missing = [r.key for r in requests if not r.optional and r.key not in columns]
        if missing:
            close = did_you_mean(missing[0], columns)
            raise SourceError(f"modules consume {missing}, which the given columns lack{close} "
                              f"(given: {sorted(columns)})")
        self.config = config
        self.columns = columns
        self.length = next(iter(lengths.values()), 1)  # no columns: one event, as for run_module
        self.files = ["<memory>"]
        self.id_branches: list[str] = []

    @property
    def total(self) -> int:
        """Events after first_entry, at most max_events (-1: all)."""
        available = max(0, self.length - self.config.first_entry)
        return available if self.config.max_events < 0 else min(available, self.config.max_events)

    def chunks(self) -> Iterator[Chunk]:
        step, first = self.config.chunk_size, self.config.first_entry
        for lo in range(first, first + self.total, step):
            hi = min(lo + step, first + self.total)
            yield Chunk(columns={key: values[lo:hi] for key, values in self.columns.items()}, file="<memory>",
                        entry_start=lo, length=hi - lo, first_index=lo - first)


def make_source(config: SourceConfig, requests: list[Request]) -> RootSource | EmptySource:
    """The source the configuration asks for."""
    return RootSource(config, requests) if config.type == "root" else EmptySource(config, requests)
