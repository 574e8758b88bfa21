"""Sources of events: ROOT files read in chunks with uproot, or an empty source for generators.

Only the branches that modules consume are read. A consumed key resolves, per file, to

* a branch of that name (``Jet_pt``, ``MET_pt``), or
* a NanoAOD-style collection: ``Jet`` with fields ``(pt, eta)`` reads ``Jet_pt`` and ``Jet_eta`` and
  zips them into records (a view of the buffers, not a copy).

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

from .config import SourceConfig
from . import remote
from .errors import SourceError, did_you_mean
from .event import Chunk

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


def _open_tree(path: str, tree: str) -> Any:
    if not remote.exists(path):  # remote files: retried reads, one clear error (framework/remote.py)
        raise SourceError(f"input file {path!r} does not exist")
    try:
        # local files through the memory map: no I/O thread, and the fastest reader uproot has
        options = {} if "://" in path else {"handler": uproot.source.file.MemmapSource}
        handle = uproot.open(path, **options)
    except Exception as err:  # uproot raises many types for a file that is not ROOT
        raise SourceError(f"cannot open {path!r} as a ROOT file: {type(err).__name__}: {err}") from None
    try:
        return handle[tree]
    except uproot.KeyInFileError:
        keys = [k.split(";")[0] for k in handle.keys(recursive=False)]
        raise SourceError(f"{path!r} has no tree or RNTuple {tree!r}{did_you_mean(tree, keys)}; "
                          f"it holds {keys}") from None
    except Exception as err:
        raise SourceError(f"cannot read {tree!r} in {path!r} (corrupt file?): {type(err).__name__}: {err}") from None


def _plan_branches(tree: Any, requests: list[Request], path: str) -> tuple[dict[str, Any], list[str]]:
    """For one file: how each request maps onto branches, and the branch list to read."""
    names = set(tree.keys())
    plan: dict[str, Any] = {}
    branches: list[str] = []
    for req in requests:
        if req.fields is None and req.key in names:
            plan[req.key] = req.key
            branches.append(req.key)
            continue
        fields = req.fields
        if fields is None:
            fields = tuple(sorted(n[len(req.key) + 1:] for n in names if n.startswith(req.key + "_")))
        wanted = [f"{req.key}_{f}" for f in fields]
        missing = [b for b in wanted if b not in names]
        if fields and not missing:
            plan[req.key] = dict(zip(fields, wanted))
            branches += wanted
        elif req.optional:
            continue
        else:
            what = missing[0] if missing else req.key
            raise SourceError(f"branch {what!r} is not in {path!r} (tree {tree.name!r}){did_you_mean(what, names)}")
    for name in ID_BRANCHES:
        if name in names and name not in branches:
            branches.append(name)
    return plan, branches


class RootSource:
    """Reads events from ROOT files (TTree or RNTuple) with uproot.

    Args:
        config (SourceConfig): files, tree, entry range, chunk size.
        requests (list[Request]): what the modules consume from the source.
    """

    def __init__(self, config: SourceConfig, requests: list[Request]):
        self.config = config
        self.requests = requests
        self.files = expand(config.files)
        if not self.files:
            raise SourceError("no input files: give source.files in the configuration or --input")
        self._open: tuple[str, Any, dict[str, Any], list[str]] | None = None
        self.entries = [self._num_entries(path) for path in self.files]
        self._check_range()
        names = set(self._tree(self.files[0])[0].keys())
        #: event-identity branches every chunk carries (present in the first file)
        self.id_branches = [name for name in ID_BRANCHES if name in names]

    def _tree(self, path: str) -> tuple[Any, dict[str, Any], list[str]]:
        """The tree of ``path`` with its branch plan, kept open while consecutive chunks come from it
        (reading a TTree's metadata costs as much as a chunk of data for NanoAOD-sized trees)."""
        if self._open is None or self._open[0] != path:
            if self._open is not None:
                self._open[1].file.close()
            tree = _open_tree(path, self.config.tree)
            plan, branches = _plan_branches(tree, self.requests, path)
            self._open = (path, tree, plan, branches)
        return self._open[1:]

    def _num_entries(self, path: str) -> int:
        tree, _, _ = self._tree(path)  # also fails early on a missing branch, naming the file
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
        """
        tree, plan, branches = self._tree(path)
        entry = start
        try:
            # the report gives each chunk's entry range even when no branch is read (then arrays is empty)
            for arrays, report in tree.iterate(filter_name=branches, step_size=self.config.chunk_size,
                                               entry_start=start, entry_stop=stop, library="ak", how=dict, report=True):
                first, entry = report.tree_entry_start, report.tree_entry_stop
                yield self._chunk(path, arrays, plan, first, entry - first, first_index + first - start)
        except SourceError:
            raise
        except Exception as err:
            raise SourceError(f"cannot read entries {entry}-{stop} of {path!r} (corrupt file?): "
                              f"{type(err).__name__}: {err}") from None

    @staticmethod
    def _chunk(path: str, arrays: dict[str, Any], plan: dict[str, Any], entry: int, length: int,
               first_index: int) -> Chunk:
        """Builds a chunk's columns (collections zipped into records, views of the read buffers)."""
        columns: dict[str, Any] = {}
        for key, spec in plan.items():
            if isinstance(spec, str):
                columns[key] = arrays[spec]
                continue
            fields = {field: arrays[branch] for field, branch in spec.items()}
            depth = min(array.ndim for array in fields.values())
            try:
                columns[key] = ak.zip(fields, depth_limit=min(depth, 2))
            except ValueError as err:
                raise SourceError(f"collection {key!r} in {path!r}: fields have different lengths "
                                  f"per event: {err}") from None
        ids = {name: ak.to_numpy(arrays[name]) for name in ID_BRANCHES if name in arrays}
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


def make_source(config: SourceConfig, requests: list[Request]) -> RootSource | EmptySource:
    """The source the configuration asks for."""
    return RootSource(config, requests) if config.type == "root" else EmptySource(config, requests)
