"""ROOT output: chosen products written with uproot, in chunks, under a temporary name.

Products are gathered into arrays over the written events (a columnar module's arrays are cut and joined,
per-event values stacked by :func:`~.batch.stack`) and written NanoAOD-style: a jagged
collection ``X`` with fields becomes a counter ``nX`` and branches ``X_<field>``; a fixed-size inner
dimension inside a jagged list (``var * 4 * float32``, which uproot cannot write there) becomes one
branch per component (``X_probs_0`` ... ``X_probs_3``).

The file is written as ``<name>.tmp-<host>-<pid>-<ns>`` next to the target and renamed only when the
job ends successfully, so a failed or killed job never leaves a file that looks complete; temporaries
of dead writers are removed when the next job writes the same target (see :mod:`.atomic`);
:class:`~.tree_writer.TreeWriter` does the writing. The process configuration and the software version
are stored in the file (``sonic_metadata``, JSON text).
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterable
from typing import Any

import awkward as ak
import numpy as np

from .atomic import check_target
from .batch import PerEvent, concatenate, stack
from .config import OutputConfig
from .errors import OutputError
from .event import Event
from .tree_writer import TreeWriter

log = logging.getLogger(__name__)

def branch_name(key: str) -> str:
    """Default branch name of an event key: ``"pnet:probs"`` → ``"pnet_probs"``; branches keep their name."""
    return key.replace(":", "_")


def writable(name: str, array: Any) -> dict[str, Any]:
    """Branches uproot can write for ``array`` under ``name`` (records kept for NanoAOD-style output)."""
    if isinstance(array, np.ndarray):
        return {name: array}
    array = ak.Array(array)
    layout_type = array.type.content

    def split_regular(arr: ak.Array, prefix: str) -> dict[str, ak.Array]:
        typ, depth = arr.type.content, 1
        while isinstance(typ, ak.types.ListType):
            typ, depth = typ.content, depth + 1
        if isinstance(typ, ak.types.RegularType) and depth > 1:
            return {f"{prefix}_{i}": arr[(slice(None),) * depth + (i,)] for i in range(typ.size)}
        return {prefix: arr}

    if isinstance(layout_type, ak.types.RecordType):  # one record per event: flat branches name_field
        out: dict[str, Any] = {}
        for field in array.fields:
            out.update(writable(f"{name}_{field}", array[field]))
        return out
    if isinstance(layout_type, ak.types.ListType) and isinstance(layout_type.content, ak.types.RecordType):
        if all(isinstance(t, ak.types.NumpyType) for t in layout_type.content.contents):
            return {name: array}  # a plain jagged collection: written as it is
        fields: dict[str, Any] = {}
        for field in array.fields:  # a jagged collection: counter nX and branches X_field
            fields.update(split_regular(array[field], field))
        return {name: ak.zip(fields, depth_limit=2)}
    if isinstance(layout_type, (ak.types.RegularType, ak.types.NumpyType)):
        return {name: ak.to_numpy(array)}
    return split_regular(array, name)


class RootOutput:
    """Writes chosen products and source columns to a ROOT TTree, atomically.

    Args:
        config (OutputConfig): file, tree, compression, chunk size.
        products (dict[str, str]): product key → branch name.
        columns (dict[str, str]): source column key → branch name (written chunk-wise, no per-event copies).
        ids (list[str]): event-identity branches to carry over (``run``, ``luminosityBlock``, ``event``).
        metadata (dict): stored as JSON text ``sonic_metadata`` (configuration, version, inputs).
        expected_events (int): events the job will deliver (sizes the basket index).
        inputs (iterable of (path, description)): files the output must not be (the job's inputs, its config).
    """

    def __init__(self, config: OutputConfig, products: dict[str, str], columns: dict[str, str], ids: list[str],
                 metadata: dict[str, Any], expected_events: int = 0, inputs: Iterable[tuple[str, str]] = ()):
        if not config.file:
            raise OutputError("no output file given")
        self.config, self.products, self.columns, self.ids = config, products, columns, ids
        self.metadata = metadata
        self.path = check_target(config.file, "output file", inputs)
        try:
            # uproot rewrites a TTree's whole header (a cost quadratic in the number of branches: seconds for
            # NanoAOD-sized trees) each time its basket index fills up; the writer sizes it for the job up front.
            self._writer = TreeWriter(self.path, config.tree, config.compression,
                                      expected_extends=-(-expected_events // config.chunk_size))
        except OSError as err:
            raise OutputError(f"cannot create the output file {config.file!r}: {err.strerror}") from None
        self.tmp_path = self._writer.tmp_path
        self._events: list[Event] = []
        self.written = 0

    def fill(self, event: Event) -> None:
        """Adds one event that passed the filters; writes a basket every ``chunk_size`` events."""
        self._events.append(event)
        if len(self._events) >= self.config.chunk_size:
            self.flush()

    def _gather(self) -> dict[str, Any]:
        events = self._events
        branches: dict[str, Any] = {}
        # Source columns and identity branches are cut from the chunks' arrays (a slice when the passing
        # events are contiguous), not gathered event by event.
        groups: list[tuple[Any, Any]] = []
        for chunk, members in itertools.groupby(events, key=lambda e: e.chunk):
            index = np.fromiter((e.i for e in members), dtype=np.int64)
            contiguous = index[-1] - index[0] + 1 == len(index)
            groups.append((chunk, slice(int(index[0]), int(index[-1]) + 1) if contiguous else index))
        for name in self.ids:
            branches[name] = np.concatenate([chunk.ids[name][sel] for chunk, sel in groups]).astype(np.int64)
        if not (self.ids or self.columns or self.products):
            # nothing per event to write (a histogram-only job on a file without run/lumi/event): a tree
            # needs a branch, so the events are counted by their index in the job
            branches["event_index"] = np.fromiter((e.index for e in events), dtype=np.int64, count=len(events))
        for key, name in self.columns.items():
            parts = [chunk.columns[key][sel] for chunk, sel in groups]
            branches.update(writable(name, parts[0] if len(parts) == 1 else ak.concatenate(parts)))
        batches = self._batch_groups()
        for key, name in self.products.items():
            try:
                array = self._product(key, batches)
            except KeyError:
                raise OutputError(f"product {key!r} is missing in an event that passed the filters "
                                  f"(is its producer after a filter that skipped it?)") from None
            try:
                branches.update(writable(name, array))
            except OutputError as err:
                raise OutputError(f"cannot write {key!r}: {err}") from None
        return branches

    def _batch_groups(self) -> list[tuple[Any, np.ndarray]]:
        """The buffered events as (batch, positions in it), in order."""
        groups = []
        for batch, members in itertools.groupby(self._events, key=lambda e: e.batch):
            groups.append((batch, np.fromiter((e.k for e in members), dtype=np.int64)))
        return groups

    @staticmethod
    def _product(key: str, batches: list[tuple[Any, np.ndarray]]) -> Any:
        """Product ``key`` over the buffered events: per-event values stacked together (one rule for a whole
        basket, as always), a columnar module's arrays cut to the written events and joined."""
        stored = [(batch.products[key], positions) for batch, positions in batches]
        if isinstance(stored[0][0], PerEvent):
            return stack([product.at(int(k)) for product, positions in stored for k in positions])
        parts = [product.take(None if len(positions) == batch.size and product.positions is None else positions)
                 for (product, positions), (batch, _) in zip(stored, batches)]
        return concatenate(parts)

    def flush(self) -> None:
        """Writes the buffered events as one basket per branch."""
        if not self._events:
            return
        branches = self._gather()
        try:
            self._writer.extend(branches)
        except (TypeError, ValueError) as err:
            raise OutputError(f"uproot cannot write these products to {self.path!r}: {err}") from None
        except OSError as err:
            raise OutputError(f"cannot write the output file {self.path!r}: {err.strerror or err}") from None
        self.written += len(self._events)
        self._events = []

    def write_object(self, path: str, obj: Any) -> None:
        """Stores a histogram or other object uproot can write (e.g. ``hist.Hist``) at ``path``."""
        try:
            self._writer[path] = obj
        except OSError as err:
            raise OutputError(f"cannot write {path!r} to the output file {self.path!r}: {err.strerror or err}") from None

    def commit(self) -> str:
        """Flushes, stores metadata, and renames the temporary file to its final name."""
        self.flush()
        try:
            if not self._writer.has_tree:  # no event passed: still write the tree, empty, so readers find it
                self._writer.create({name: np.int64 for name in self.ids} or {"event_index": np.int64})
            self.metadata["events_written"] = self.written
            self._writer["sonic_metadata"] = json.dumps(self.metadata, default=str)
            self._writer.commit()
        except OSError as err:
            raise OutputError(f"cannot write the output file {self.path!r}: {err.strerror or err}") from None
        log.debug("wrote %d events to %s", self.written, self.path)
        return self.path

    def abort(self) -> None:
        """Discards the temporary file (a failed job leaves nothing that looks like output)."""
        self._writer.abort()
