"""Splitting into jobs: files per job, entry ranges across file boundaries, generator ranges; input lists."""

from __future__ import annotations

import itertools

import pytest

from sonic_hep.workflows.grid.errors import GridError
from sonic_hep.workflows.grid.inputs import count_entries, resolve_inputs
from sonic_hep.workflows.grid.splitting import by_events, by_files, generated


def covered(files, entries, jobs):
    """(file, entry) pairs each job processes, from its files and its range over their concatenation."""
    sizes = dict(zip(files, entries, strict=True))
    out = []
    for job in jobs:
        pairs = [(f, e) for f in job.inputs for e in range(sizes[f])]
        stop = None if job.max_events < 0 else job.first_entry + job.max_events
        out.append(pairs[job.first_entry:stop])
    return out


@pytest.mark.parametrize("per_job", [1, 7, 100, 149, 150, 151, 1000])
def test_event_ranges_cover_every_entry_once_in_order(per_job):
    files, entries = ["a", "b", "empty", "c"], [150, 90, 0, 31]
    jobs = by_events(files, entries, per_job)
    flat = list(itertools.chain.from_iterable(covered(files, entries, jobs)))
    assert flat == [(f, e) for f, n in zip(files, entries, strict=True) for e in range(n)]
    assert [j.index for j in jobs] == list(range(len(jobs)))
    assert all(j.expected_events == len(c) for j, c in zip(jobs, covered(files, entries, jobs), strict=True))
    assert all("empty" not in j.inputs for j in jobs)


def test_event_ranges_honour_the_configured_range():
    files, entries = ["a", "b"], [150, 90]
    jobs = by_events(files, entries, 50, first_entry=140, max_events=65)
    assert [(j.inputs, j.first_entry, j.max_events) for j in jobs] == [(("a", "b"), 140, 50), (("b",), 40, 15)]
    assert list(itertools.chain.from_iterable(covered(files, entries, jobs))) == \
        [("a", e) for e in range(140, 150)] + [("b", e) for e in range(0, 55)]


def test_files_per_job_and_generated_ranges():
    jobs = by_files(["a", "b", "c", "d", "e"], 2)
    assert [j.inputs for j in jobs] == [("a", "b"), ("c", "d"), ("e",)]
    assert all(j.first_entry == 0 and j.max_events == -1 and j.expected_events is None for j in jobs)
    gen = generated(45, 20)
    assert [(j.first_entry, j.max_events) for j in gen] == [(0, 20), (20, 20), (40, 5)] and gen[0].inputs == ()
    ranged = generated(100, 30, first_entry=10, max_events=50)
    assert [(j.first_entry, j.max_events) for j in ranged] == [(10, 30), (40, 20)]
    with pytest.raises(GridError, match="at least 1"):
        by_files(["a"], 0)


def test_inputs_from_globs_lists_and_relative_paths(tmp_path, inputs, monkeypatch):
    monkeypatch.chdir(inputs[0].parent)
    listing = tmp_path / "files.list"
    listing.write_text(f"# two files\n{inputs[2]}\n\n{inputs[0]}  # first\n")
    got = resolve_inputs(["in1.root", f"@{listing}", "root://eos.example//store/x.root"])
    assert got == [str(inputs[1]), str(inputs[2]), str(inputs[0]), "root://eos.example//store/x.root"]
    assert resolve_inputs([str(inputs[0].parent / "in*.root")]) == [str(p) for p in inputs]
    with pytest.raises(GridError, match="no input file matches"):
        resolve_inputs(["nothing-*.root"])


def test_count_entries_names_every_unreadable_file(tmp_path, inputs):
    assert count_entries([str(p) for p in inputs], "Events") == [120, 80, 100]
    bad = tmp_path / "bad.root"
    bad.write_text("not ROOT")
    with pytest.raises(GridError) as err:
        count_entries([str(inputs[0]), str(bad), str(tmp_path / "missing.root")], "Events")
    assert "2 of 3 input files cannot be read" in str(err.value)
    assert "bad.root" in str(err.value) and "missing.root" in str(err.value)
