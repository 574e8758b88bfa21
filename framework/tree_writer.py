"""The one way to write a NanoAOD-style TTree: under a temporary name, renamed into place when complete.

Job outputs (:mod:`.output`), ``sonic merge``, the event generators (``sonic data generate``) and the
I/O benchmark's input all write ROOT files that another program reads later. Each used to open its own
``uproot.recreate`` on its own temporary name; :class:`TreeWriter` is that, once:

* the file is written as ``<target>.tmp-<host>-<pid>-<ns>`` (:func:`.atomic.temporary_name`), flushed to
  disk and renamed only by :meth:`TreeWriter.commit` (:func:`.atomic.put_in_place`), so a failed or killed
  writer never leaves a file that looks complete, and temporaries of dead writers are removed first
  (:func:`.atomic.remove_stale_temporaries`);
* branches are named NanoAOD-style: a jagged collection ``X`` of records becomes the counter ``nX`` and
  branches ``X_<field>``;
* the basket index is sized up front from the number of ``extend`` calls expected, because uproot
  rewrites the whole TTree header (a cost quadratic in the number of branches) each time it fills up.

Example::

    with TreeWriter("out.root", compression="zstd:4", expected_extends=10) as writer:
        for chunk in chunks:
            writer.extend({"event": chunk.event, "Jet": ak.zip({"pt": chunk.pt, "eta": chunk.eta})})
        writer["settings"] = json.dumps(settings)     # any object uproot can write
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import numpy as np
import uproot

from .atomic import put_in_place, remove_stale_temporaries, temporary_name
from .errors import OutputError

COMPRESSION = {"zstd": (uproot.ZSTD, 4), "lz4": (uproot.LZ4, 4), "zlib": (uproot.ZLIB, 1), "lzma": (uproot.LZMA, 8)}

#: uproot's own basket-index size, enough for a tree written in a few ``extend`` calls
DEFAULT_BASKETS = 10


def compression(spec: str) -> Any:
    """uproot compression from ``"zstd:4"``, ``"lz4"``, ``"none"``..."""
    if spec in ("none", "", "0"):
        return None
    algo, _, level = spec.partition(":")
    if algo not in COMPRESSION or (level and not level.isdigit()):
        raise OutputError(f"unknown compression {spec!r}; use one of {sorted(COMPRESSION)} with an optional ':level'")
    cls, default = COMPRESSION[algo]
    return cls(int(level) if level else default)


_codec = compression  # for TreeWriter, whose argument of that name is the spec


def branch_type(array: Any) -> Any:
    """The type uproot's ``mktree`` needs for a branch array (numpy: its dtype, with any inner shape)."""
    if isinstance(array, np.ndarray):
        return array.dtype if array.ndim == 1 else np.dtype((array.dtype, array.shape[1:]))
    return array.type.content


def field_name(outer: str, inner: str) -> str:
    """NanoAOD branch name of field ``inner`` of collection ``outer``: ``Jet_pt``."""
    return f"{outer}_{inner}"


def counter_name(counted: str) -> str:
    """NanoAOD name of a collection's counter: ``nJet``."""
    return f"n{counted}"


class TreeWriter:
    """One ROOT file with one NanoAOD-style TTree, written atomically.

    Args:
        path: the target file (its folder must exist; the caller checks anything more).
        tree: the TTree's name.
        compression: a spec for :func:`compression` (``"zstd:4"``, ``"zlib:1"`` is uproot's default, ``"none"``).
        expected_extends: how many :meth:`extend` calls will come (sizes the basket index; at least
            :data:`DEFAULT_BASKETS`).

    Used as a context manager it commits when the block ends normally and aborts (removes the temporary)
    when it raises. Errors are uproot's and the operating system's (``OSError``, ``TypeError``,
    ``ValueError``): each caller words them for its user.
    """

    def __init__(self, path: str | os.PathLike, tree: str = "Events", compression: str = "zlib:1",
                 expected_extends: int = 0):
        self.path = os.path.abspath(os.fspath(path))
        self.tree_name = tree
        codec = _codec(compression)
        remove_stale_temporaries(self.path)
        self.tmp_path = temporary_name(self.path)
        self.file = uproot.recreate(self.tmp_path, compression=codec)
        self._baskets = max(DEFAULT_BASKETS, expected_extends + 2)
        self._tree: Any = None
        self.entries = 0

    @property
    def has_tree(self) -> bool:
        """Whether the tree exists yet (made by the first :meth:`extend` or by :meth:`create`)."""
        return self._tree is not None

    def create(self, types: Mapping[str, Any]) -> None:
        """Makes the tree with these branch types (``name → dtype or awkward type``) and no entries yet."""
        self._tree = self.file.mktree(self.tree_name, dict(types), field_name=field_name, counter_name=counter_name,
                                      initial_basket_capacity=self._baskets)

    def extend(self, branches: Mapping[str, Any]) -> None:
        """Appends one basket per branch; the first call makes the tree from the arrays' types."""
        if self._tree is None:
            self.create({name: branch_type(array) for name, array in branches.items()})
        self._tree.extend(dict(branches))
        self.entries += len(next(iter(branches.values()))) if branches else 0

    def __setitem__(self, name: str, obj: Any) -> None:
        """Stores another object (a histogram, JSON text) beside the tree."""
        self.file[name] = obj

    def commit(self, check: Callable[[str], None] | None = None, replace: bool = True) -> str:
        """Closes the file, puts it on disk, runs ``check(temporary path)`` and renames it into place.

        ``check`` may read the closed temporary and raise to refuse it (then call :meth:`abort`). With
        ``replace=False`` an existing file is never replaced, even one that appeared while this one was
        written (two writers racing for one name: the second gets ``FileExistsError``, the first's file stays):
        the name is given by a hard link, which the system refuses atomically when the name exists.
        """
        self.file.close()
        if check is not None:
            check(self.tmp_path)
        return put_in_place(self.tmp_path, self.path, replace)

    def abort(self) -> None:
        """Discards the temporary (a failed writer leaves nothing that looks complete)."""
        try:
            self.file.close()
        except Exception:  # noqa: BLE001 - closing a half-written file may fail; it is deleted anyway
            pass
        try:
            os.unlink(self.tmp_path)
        except FileNotFoundError:
            pass

    def __enter__(self) -> TreeWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if kind is None:
            try:
                self.commit()
            except BaseException:
                self.abort()
                raise
        else:
            self.abort()
