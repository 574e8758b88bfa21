"""Input files of a task: paths, globs and file lists → one ordered list, and their entry counts.

``--input`` takes ROOT files, globs (expanded sorted, so a task is reproducible) and file lists: a
path ending in ``.txt`` or ``.list``, or written ``@list``, holds one file (or glob) per line, ``#``
comments allowed. Local paths become absolute, because jobs may run in another directory or on
another node; URLs (``root://``, ``https://``) are kept as given, and a ``root://`` pattern
(``root://host//store/run1/*.root``) is expanded by listing the XRootD directory.
"""

from __future__ import annotations

import glob
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ...framework import remote
from ...framework.errors import SourceError
from ...framework.source import open_tree, expand
from .errors import GridError

LIST_SUFFIXES = (".txt", ".list")


def _is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _read_list(path: str) -> list[str]:
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise GridError(f"cannot read the file list {path!r}: {err.strerror}") from None
    base = os.path.dirname(os.path.abspath(path))
    entries = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            entries.append(line if _is_url(line) or os.path.isabs(line) else os.path.join(base, line))
    return entries


def resolve_inputs(items: list[str]) -> list[str]:
    """The task's input files, in order: lists read, globs expanded, local paths absolute.

    Args:
        items: what ``--input`` was given (or the configuration's ``source.files``).

    Raises:
        GridError: for an unreadable file list, a glob that matches nothing, or no input at all.
    """
    patterns: list[str] = []
    for item in items:
        if item.startswith("@"):
            patterns += _read_list(item[1:])
        elif item.endswith(LIST_SUFFIXES) and not _is_url(item):
            patterns += _read_list(item)
        else:
            patterns.append(item)
    try:
        files = []
        for pattern in patterns:  # a remote pattern is listed on its server, everything else as a run would
            remote_pattern = remote.scheme(pattern) in remote.XROOTD_SCHEMES and glob.has_magic(pattern)
            files += remote.glob(pattern) if remote_pattern else expand([pattern])
    except SourceError as err:
        raise GridError(str(err)) from None
    if not files:
        raise GridError("no input files: give --input FILES (or source.files in the configuration)")
    return [f if _is_url(f) else os.path.abspath(f.removeprefix("file://")) for f in files]


def count_entries(files: list[str], tree: str, threads: int = 8) -> list[int]:
    """Entries of ``tree`` in each file, opened concurrently (for splitting by events).

    Raises:
        GridError: listing every file that cannot be read, with the reason for each.
    """

    def one(path: str) -> int | str:
        try:
            return int(open_tree(path, tree).num_entries)
        except SourceError as err:
            return str(err)

    with ThreadPoolExecutor(max(1, min(threads, len(files)))) as pool:
        results = list(pool.map(one, files))
    bad = [result for result in results if isinstance(result, str)]
    if bad:
        raise GridError(f"{len(bad)} of {len(files)} input files cannot be read:\n  " + "\n  ".join(bad))
    return [int(n) for n in results]
