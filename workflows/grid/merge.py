"""``sonic merge``: the job outputs of a finished task as one ROOT file, like ``hadd``, with uproot.

Refuses unless every job is done and every output validates: entry count = events the job wrote,
its metadata name the inputs and entry range the job was asked for, and its sha256 is the one
recorded when the job was marked done (:mod:`integrity`: a swapped or corrupted output is refused,
naming the job and what differs). The merged file may not lie inside the task's job folders.
Event trees are concatenated in job order — the order of the entries in the inputs — so the result
equals one process run over all inputs; histograms (the Analyzers' ``hist`` objects) are summed.
NanoAOD-style collections keep their layout: branches ``X_field`` that share the counter ``nX`` are
written back as one collection with that counter. The merged file is written under a temporary
name, its entry count checked against the sum, and only then renamed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import awkward as ak
import numpy as np
import uproot

from ...framework.provenance import digest_conflicts
from ...framework.provenance import merged as merged_provenance
from ...framework.tree_writer import TreeWriter
from .errors import GridError, IncompleteTask
from .integrity import read_metadata, seal_mismatch, spec_mismatch
from .job_folders import refuse_task_path
from .status import collect
from .task import Task
from .validation import check_output

METADATA = "sonic_metadata"


@dataclass(frozen=True)
class Layout:
    """How a tree's branches are written back: collections (name → counter, field branches) and the rest."""

    collections: dict[str, tuple[str, dict[str, str]]]
    flat: list[str]

    @classmethod
    def of(cls, tree: Any) -> Layout:
        collections: dict[str, tuple[str, dict[str, str]]] = {}
        flat: list[str] = []
        counters: set[str] = set()
        for branch in tree.branches:
            count = getattr(branch, "count_branch", None)
            if count is None:
                flat.append(branch.name)
                continue
            counters.add(count.name)
            group = count.name[1:] if count.name.startswith("n") else count.name
            if branch.name.startswith(group + "_"):
                collections.setdefault(group, (count.name, {}))[1][branch.name[len(group) + 1:]] = branch.name
            else:
                collections[branch.name] = (count.name, {})
        return cls(collections, [name for name in flat if name not in counters])

    def arrays(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """One chunk read with ``how=dict`` → arrays for ``mktree``/``extend`` in this layout."""
        out: dict[str, Any] = {name: _numpy(chunk[name]) for name in self.flat}
        for group, (_, fields) in self.collections.items():
            out[group] = ak.zip({field: chunk[branch] for field, branch in fields.items()}) if fields else chunk[group]
        return out

    def branches(self) -> list[str]:
        return self.flat + [b for _, (_, fields) in self.collections.items() for b in fields.values()] + \
            [g for g, (_, fields) in self.collections.items() if not fields]


def _numpy(array: Any) -> Any:
    return ak.to_numpy(array) if isinstance(array, ak.Array) else np.asarray(array)


def check_complete(task: Task, tree: str) -> list[tuple[int, str, int]]:
    """Every job's validated output, in job order: (index, path, entries).

    Raises:
        IncompleteTask: one line naming each job that is not done or whose output is not the one it
            wrote (does not validate, holds another job's entries, changed since it was marked done).
    """
    statuses, _ = collect(task, log_lines=0)
    problems = [f"job {s.index}: {s.state}" + (f" ({s.reason})" if s.reason else "")
                for s in statuses if s.state != "done"]
    outputs = []
    for s in statuses:
        if s.state != "done":
            continue
        problem = _output_problem(task, s.index, s.report, tree)
        if problem:
            problems.append(f"job {s.index}: {problem}")
            continue
        outputs.append((s.index, str(task.files(s.index).output), int(s.report.written)))
    if problems:
        shown = problems[:10] + ([f"... and {len(problems) - 10} more"] if len(problems) > 10 else [])
        raise IncompleteTask(f"cannot merge {task.directory}: {len(problems)} of {task.njobs} jobs are not "
                             f"complete: {'; '.join(' '.join(p.split()) for p in shown)} (see `sonic status "
                             f"{task.directory}`, `sonic resubmit {task.directory}`)")
    return outputs


def _output_problem(task: Task, index: int, report: Any, tree: str) -> str | None:
    """What is wrong with a done job's output, or None: it validates, is this job's, and is unchanged."""
    path = task.files(index).output
    try:
        check = check_output(path, tree)
    except GridError as err:
        return f"output does not validate: {err}"
    if check.entries != report.written:
        return f"{path} holds {check.entries} entries, the job reported {report.written}"
    spec, _ = task.spec(index)
    wrong = spec_mismatch(spec, check.metadata, sandboxed=report.sandbox)
    if wrong:
        return f"{path.name} is not its output: {wrong}"
    return seal_mismatch(path, report, full=True)


def _objects(handle: Any, tree: str) -> Iterator[tuple[str, Any]]:
    """Histograms and other objects besides the tree and the metadata (``dir/name`` paths)."""
    for key, cls in handle.classnames(recursive=True, cycle=False).items():
        if key in (tree, METADATA) or cls == "TDirectory" or cls.startswith("TTree"):
            continue
        yield key, handle[key]


def merge(task: Task, output: str | os.PathLike, tree: str = "Events", compression: str = "zstd:4",
          step_size: str = "100 MB", replace: bool = False) -> int:
    """Merges the task's outputs into ``output``; returns the number of entries.

    ``output`` is replaced only with ``replace`` (``sonic merge --force``): without it, a file of that name
    that appears while the merge runs (another merge into the same name) is kept, and this merge fails.

    Raises:
        IncompleteTask: a job is not done or its output does not validate.
        GridError: the outputs have different branches, the merged count does not add up, or
            ``output`` cannot be written (see :func:`check_target`), or exists and ``replace`` is not set.
    """
    check_target(task, output)
    outputs = check_complete(task, tree)
    check_same_models(task, outputs)
    target = os.path.abspath(output)
    expected = sum(n for _, _, n in outputs)
    reference = next(((i, p) for i, p, n in outputs if n > 0), (outputs[0][0], outputs[0][1]))
    with uproot.open(reference[1]) as handle:
        layout = Layout.of(handle[tree])
    histograms: dict[str, Any] = {}
    metadata: list[dict[str, Any]] = []
    sink: TreeWriter | None = None
    try:
        sink = TreeWriter(target, tree, compression)  # removes temporaries left by a merge that was killed
        for index, path, entries in outputs:
            with uproot.open(path) as handle:
                metadata.append(json.loads(str(handle[METADATA])))
                for key, obj in _objects(handle, tree):
                    hist = obj.to_hist() if hasattr(obj, "to_hist") else None
                    if hist is None:
                        histograms.setdefault(key, obj)
                    else:
                        histograms[key] = hist if key not in histograms else histograms[key] + hist
                if entries == 0:
                    continue
                source = handle[tree]
                missing = set(layout.branches()) - set(source.keys())
                if missing:
                    raise GridError(f"job {index} output {path} lacks branches {sorted(missing)} that job "
                                    f"{reference[0]} has: outputs of different configurations cannot be merged")
                for chunk in source.iterate(layout.branches(), step_size=step_size, library="ak", how=dict):
                    sink.extend(layout.arrays(chunk))
        written = sink.entries
        if not sink.has_tree:  # every job wrote zero events: keep an empty tree of the same branches
            with uproot.open(reference[1]) as handle:
                empty = handle[tree].arrays(library="np")
            sink.create({k: v.dtype for k, v in empty.items()})
        for key, obj in histograms.items():
            sink[key] = obj
        sink[METADATA] = json.dumps(merged_metadata(task, metadata, written), default=str)
        if written != expected:
            raise GridError(f"merged {written} entries but the jobs wrote {expected}; {target} not written")

        def check(tmp: str) -> None:
            with uproot.open(tmp) as merged:
                if int(merged[tree].num_entries) != expected:
                    raise GridError(f"{tmp} holds {merged[tree].num_entries} entries, expected {expected}")

        sink.commit(check, replace=replace)
    except FileExistsError:
        raise GridError(f"merge --output {str(output)!r} was written by another merge meanwhile; it is kept "
                        f"(give --force to replace it)") from None
    except OSError as err:  # a full disk, a quota: nothing is left that looks complete
        where = f"{err.filename}: " if err.filename else ""
        raise GridError(f"cannot merge into {target}: {where}{err.strerror or err}") from None
    finally:
        if sink is not None and os.path.exists(sink.tmp_path):
            sink.abort()
    return written


def check_target(task: Task, output: str | os.PathLike) -> None:
    """Refuses, before any output is read, a merged file that would replace what the task needs or that
    cannot be written: one inside a task's job folders or records, one of the task's inputs, a directory,
    or a path whose directory is missing or read-only.

    Raises:
        GridError: naming ``output`` and why.
    """
    refuse_task_path(output, "merge --output")
    target = os.path.realpath(output)
    if target in {os.path.realpath(p) for p in task.description.inputs if "://" not in p}:
        raise GridError(f"merge --output {os.fspath(output)!r} is an input of the task {task.directory}; "
                        f"name another file")
    if os.path.isdir(target):
        raise GridError(f"merge --output {os.fspath(output)!r} is a directory; name a file in it")
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        raise GridError(f"merge --output {os.fspath(output)!r}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise GridError(f"merge --output {os.fspath(output)!r}: directory {parent} is not writable")


def check_same_models(task: Task, outputs: list[tuple[int, str, int]]) -> None:
    """Refuses, before anything is written, outputs whose model digests differ: events of two models
    (a server that served other weights, a model replaced between jobs) do not belong in one file.

    Raises:
        GridError: naming the model, two jobs and their digests.
    """
    pieces = [(f"job {index}", read_metadata(path) or {}) for index, path, _ in outputs]
    conflict = digest_conflicts(pieces)
    if conflict:
        raise GridError(f"cannot merge {task.directory}: its outputs were made by different models: {conflict} "
                        f"(rerun the jobs of one of them with the same model)")


def merged_metadata(task: Task, parts: list[dict[str, Any]], written: int) -> dict[str, Any]:
    """The merged file's ``sonic_metadata``: the first job's, plus where the pieces came from, and the
    provenance of all (answers summed per model)."""
    first = dict(parts[0]) if parts else {}
    if any("provenance" in p for p in parts):
        first["provenance"] = merged_provenance([p.get("provenance", {}) for p in parts])
    for key in ("first_entry", "max_events", "host", "created"):
        first.pop(key, None)  # they describe one job, not the merged file
    first.update(events_written=written, merged=time.time(), task=str(task.directory), jobs=len(parts),
                 inputs=list(dict.fromkeys(f for p in parts for f in p.get("inputs", []))))
    return first
