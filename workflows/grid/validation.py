"""Checks that a job's output is complete, and the numbers of its timing report that status shows.

An output is accepted only if it opens, holds the event tree and the ``sonic_metadata`` the
framework writes last, and the tree's entry count equals the ``events_written`` recorded there.
The job wrapper checks this before reporting ``done``; ``merge`` checks it again before merging.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import uproot

from .errors import GridError


@dataclass(frozen=True)
class OutputCheck:
    """A validated output: its entries, size in bytes, and the framework's metadata."""

    entries: int
    size: int
    metadata: dict[str, Any]


def check_output(path: str | os.PathLike, tree: str = "Events") -> OutputCheck:
    """Validates one job output.

    Raises:
        GridError: naming the file and what is wrong with it.
    """
    path = str(path)
    if not os.path.exists(path):
        raise GridError(f"{path} does not exist")
    try:
        with uproot.open(path) as handle:
            if "sonic_metadata" not in handle:
                raise GridError(f"{path} has no sonic_metadata (not written by a complete sonic run)")
            metadata = json.loads(str(handle["sonic_metadata"]))
            if tree not in handle:
                raise GridError(f"{path} has no tree {tree!r}")
            entries = int(handle[tree].num_entries)
    except GridError:
        raise
    except Exception as err:  # uproot raises many kinds for a truncated or corrupt file
        raise GridError(f"{path} cannot be read: {type(err).__name__}: {err}") from None
    written = metadata.get("events_written")
    if written != entries:
        raise GridError(f"{path}: tree {tree!r} holds {entries} entries, but the job wrote {written}")
    return OutputCheck(entries=entries, size=os.path.getsize(path), metadata=metadata)


def timing_summary(timing: dict[str, Any]) -> dict[str, Any]:
    """The figures of a timing report shown per job: events/s, CPU per event, wait on inference."""
    events = int(timing.get("events", 0))
    modules = timing.get("modules", [])
    external = [m for m in modules if m.get("kind") == "external"]
    summary = {"events": events, "wall_s": float(timing.get("wall_s", 0.0)), "cpu_s": float(timing.get("cpu_s", 0.0)),
               "events_per_s": float(timing.get("events_per_s", 0.0)),
               "wait_ms_per_event": sum(float(m.get("wait_ms_per_event", 0.0)) for m in external),
               "external_modules": [m["label"] for m in external]}
    inference = timing.get("inference")
    if isinstance(inference, dict):
        summary["inference_mode"] = inference.get("mode")
    return summary
