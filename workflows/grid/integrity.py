"""Is this file the output its job wrote? Two witnesses: what the file says it is, and its bytes.

* **What the job was asked** — the framework stores the inputs and the entry range it processed in
  the file's ``sonic_metadata``; they must equal the job's ``job.json``. A valid output of another
  job (swapped, or copied over this one) holds other entries and is caught here, even when it has
  as many entries as this job's.
* **What the job wrote** — the wrapper records the output's sha256 (and size and modification
  time) in ``state.json`` when it marks the job done. ``merge`` recomputes the digest; ``status``
  compares size and modification time (a ``stat``, so it stays cheap on thousands of jobs) or, with
  ``--verify``, the digest too. Bytes changed later — a corrupted basket, a partial copy, bit rot —
  are caught here.

Each check returns None or one line saying what differs, so callers name the job and go on;
:func:`what_changed` combines them for ``status``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .records import JobReport
from .splitting import JobSpec

CHUNK = 1 << 20


def sha256_of(path: str | os.PathLike) -> str:
    """The hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while block := stream.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Seal:
    """What the wrapper records of a done job's output (fields of ``state.json``)."""

    sha256: str
    output_bytes: int
    output_mtime_ns: int

    @classmethod
    def of(cls, path: str | os.PathLike) -> Seal:
        stat = os.stat(path)
        return cls(sha256_of(path), stat.st_size, stat.st_mtime_ns)


def read_metadata(path: str | os.PathLike) -> dict[str, Any] | None:
    """The ``sonic_metadata`` of an output, or None when it cannot be read."""
    import uproot

    try:
        with uproot.open(path) as handle:
            return json.loads(str(handle["sonic_metadata"]))
    except Exception:  # noqa: BLE001 - missing, truncated, not ROOT: the caller says what changed instead
        return None


def _range(inputs: list[str], first_entry: int, max_events: int) -> str:
    names = ", ".join(Path(p).name for p in inputs) or "the generator"
    if max_events < 0:
        return f"all entries of {names}" if first_entry == 0 else f"entries {first_entry} onward of {names}"
    return f"entries {first_entry}-{first_entry + max_events - 1} of {names}"


def _same_inputs(asked: list[str], found: list[str], sandboxed: bool) -> bool:
    """Paths equal; in an HTCondor sandbox the job read transferred copies, so the file names must be."""
    if not asked:
        return found in ([], ["<empty>"])
    if sandboxed:
        return [Path(p).name for p in asked] == [Path(p).name for p in found]
    return [os.path.normpath(p) if "://" not in p else p for p in asked] == \
        [os.path.normpath(p) if "://" not in p else p for p in found]


def spec_mismatch(spec: JobSpec, metadata: dict[str, Any], sandboxed: bool = False) -> str | None:
    """None when the output's metadata describe exactly the job ``spec``; else what differs."""
    asked = (list(spec.inputs), int(spec.first_entry), int(spec.max_events))
    try:
        found = ([str(p) for p in metadata.get("inputs", [])], int(metadata.get("first_entry", 0)),
                 int(metadata.get("max_events", -1)))
    except (TypeError, ValueError):
        return "its metadata do not say which inputs and entries it holds"
    if _same_inputs(asked[0], found[0], sandboxed) and asked[1:] == found[1:]:
        return None
    return (f"it holds {_range(*found)}, but job {spec.index} was asked for {_range(*asked)} "
            f"(another job's output?)")


def seal_mismatch(path: str | os.PathLike, report: JobReport, full: bool) -> str | None:
    """None when ``path`` is still what the job marked done; else what changed.

    Args:
        full: recompute the sha256 (``merge``, ``status --verify``). Otherwise compare the size and
            modification time, and recompute the digest only when the time moved (for an HTCondor
            sandbox job, whose file was transferred back after it was sealed, the size only).
    """
    name = Path(path).name
    if report.sha256 is None:  # a job of an older sonic-hep: only a full check (merge, --verify) insists
        return None if not full else "no digest was recorded when it was marked done (a job of an older sonic-hep); resubmit it"
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return f"{name} is missing (it was removed after the job was marked done)"
    if report.output_bytes is not None and stat.st_size != report.output_bytes:
        return f"{name} changed after the job was marked done: {stat.st_size} bytes, {report.output_bytes} recorded"
    touched = not report.sandbox and report.output_mtime_ns is not None and stat.st_mtime_ns != report.output_mtime_ns
    if not (full or touched):
        return None
    now = sha256_of(path)
    if now != report.sha256:
        return f"{name} changed after the job was marked done: sha256 {now[:12]}..., {report.sha256[:12]}... recorded"
    return None


def what_changed(path: str | os.PathLike, spec: Callable[[], JobSpec], report: JobReport, full: bool) -> str | None:
    """None when a done job's output is as it was marked done; else what differs, the entries it holds
    first when it is another job's output (a swap keeps the file valid but moves the entries).

    Args:
        spec: gives the job's spec (read only when the output changed).
    """
    changed = seal_mismatch(path, report, full)
    if changed is None or not os.path.exists(path):
        return changed
    metadata = read_metadata(path)
    wrong = spec_mismatch(spec(), metadata, report.sandbox) if metadata is not None else None
    return wrong or changed
