"""framework.tree_writer.TreeWriter: the one atomic NanoAOD-style tree writer (job outputs, merge,
generators, the I/O benchmark's input)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import awkward as ak
import numpy as np
import pytest
import uproot

from sonic_hep.data.protodune.generate import generate as protodune_generate
from sonic_hep.framework.atomic import temporary_name, writer_of
from sonic_hep.framework.tree_writer import TreeWriter


def jets(counts: list[int]) -> ak.Array:
    pt = ak.unflatten(np.arange(sum(counts), dtype=np.float32), counts)
    return ak.zip({"pt": pt, "eta": -pt})


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_nanoaod_names_and_nothing_visible_before_commit(tmp_path):
    target = tmp_path / "out.root"
    writer = TreeWriter(target, compression="zstd:4", expected_extends=2)
    writer.extend({"event": np.array([1, 2], np.int64), "Jet": jets([2, 0])})
    writer.extend({"event": np.array([3], np.int64), "Jet": jets([1])})
    writer["meta"] = json.dumps({"a": 1})
    assert not target.exists() and writer_of(writer.tmp_path) is not None
    assert writer.entries == 3
    assert writer.commit() == str(target)
    assert not os.path.exists(writer.tmp_path)
    with uproot.open(target) as f:
        tree = f["Events"]
        assert sorted(tree.keys()) == ["Jet_eta", "Jet_pt", "event", "nJet"]
        assert tree["nJet"].array(library="np").tolist() == [2, 0, 1]
        assert tree["event"].array(library="np").tolist() == [1, 2, 3]
        assert json.loads(str(f["meta"])) == {"a": 1}


def test_a_failure_inside_the_block_leaves_no_file(tmp_path):
    target = tmp_path / "out.root"
    with pytest.raises(RuntimeError, match="generator broke"):
        with TreeWriter(target) as writer:
            writer.extend({"event": np.array([1], np.int64)})
            raise RuntimeError("generator broke")
    assert list(tmp_path.iterdir()) == []


def test_a_refused_check_keeps_the_target_away(tmp_path):
    target = tmp_path / "out.root"
    writer = TreeWriter(target)
    writer.create({"event": np.int64})

    def refuse(path: str) -> None:
        with uproot.open(path) as f:
            raise ValueError(f"{f['Events'].num_entries} entries")

    with pytest.raises(ValueError, match="0 entries"):
        writer.commit(refuse)
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_a_dead_writers_temporary_is_removed(tmp_path):
    target = tmp_path / "out.root"
    host = writer_of(temporary_name(str(target)))[0]
    stale = tmp_path / f"out.root.tmp-{host}-{dead_pid()}-1"
    stale.write_bytes(b"half a file")
    with TreeWriter(target) as writer:
        writer.extend({"event": np.array([1], np.int64)})
    assert not stale.exists() and target.exists()


def test_a_generator_writes_through_it(tmp_path):
    """The generators used ``<path>.tmp-<pid>``: a name no later run could recognise as a dead writer's."""
    target = tmp_path / "pd.root"
    host = writer_of(temporary_name(str(target)))[0]
    stale = tmp_path / f"pd.root.tmp-{host}-{dead_pid()}-1"
    stale.write_bytes(b"half a file")
    protodune_generate(target, 1, scale="small", seed=2)
    assert not stale.exists()
    with uproot.open(target) as f:
        assert f["Events"].num_entries == 1 and "nRoi" in f["Events"].keys()
