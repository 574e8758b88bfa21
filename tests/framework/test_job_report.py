"""The end-of-job report: per-module visited/passed/failed counts (TrigReport), events/s, peak RSS, a legend line per
column, and the external-work latency defined per event; the same in the timing JSON."""

from __future__ import annotations

import json

import awkward as ak
import numpy as np
import uproot

import sonic_hep.modules.common.collections  # noqa: F401 - registers the module types
import sonic_hep.modules.common.synthetic  # noqa: F401
from sonic_hep.framework import Process
from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.timing import LEGEND, peak_rss_mb


def _selection(write_config, files, min_count: int):
    return write_config({
        "process": "report",
        "source": {"files": [str(f) for f in files], "chunk_size": 50},
        "modules": {"ht": {"type": "CollectionSum", "min_pt": 30.0},
                    "two": {"type": "MinCountFilter", "min_pt": 30.0, "min_count": min_count},
                    "good": {"type": "SelectObjects", "min_pt": 25.0},
                    "wait": {"type": "SleepExternal", "ms": 2.0}},
        "path": ["ht", "two", "good", "wait"],
        "output": {"products": ["ht:*", "good:*", "wait:*"]},
        "options": {"streams": 3, "threads": 2},
    })


def _expected_passing(files, min_pt: float, min_count: int) -> int:
    """Events with at least ``min_count`` jets above ``min_pt``, counted with plain uproot + awkward."""
    total = 0
    for path in files:
        with uproot.open(path) as handle:
            pt = handle["Events"]["Jet_pt"].array()
        total += int(ak.sum(ak.sum(pt > min_pt, axis=1) >= min_count))
    return total


def test_filter_counts_rss_and_legend_in_table_and_json(nano_files, write_config, tmp_path):
    config = _selection(write_config, nano_files, min_count=3)
    before = peak_rss_mb()
    json_path = tmp_path / "timing.json"
    result = Process(cfgmod.load(config, [f"output.file={tmp_path / 'out.root'}"])).run(
        timing_json=str(json_path), progress=False)
    report = json.loads(json_path.read_text())
    total = sum(uproot.open(f)["Events"].num_entries for f in nano_files)
    passing = _expected_passing(nano_files, 30.0, 3)
    assert 0 < passing < total
    modules = {m["label"]: m for m in report["modules"]}
    assert (modules["ht"]["visited"], modules["ht"]["passed"], modules["ht"]["failed"]) == (total, total, 0)
    assert (modules["two"]["visited"], modules["two"]["passed"], modules["two"]["failed"]) == \
        (total, passing, total - passing)
    # modules guarded by the filter visit only the events it passed (CMSSW's TrigReport "Visited")
    assert modules["good"]["visited"] == modules["wait"]["visited"] == passing
    assert report["events"] == total and report["events_passed"] == passing == result.written
    assert report["peak_rss_mb"] >= before > 0
    assert report["streams"] == 3 and report["worker_threads"] == 2
    assert set(report["legend"]) == set(LEGEND)
    # the latency is the mean per event that waited; the old per-job figure is kept, and they agree
    wait = modules["wait"]
    assert np.isclose(wait["latency_ms"] * wait["visited"], wait["wait_ms_per_event"] * report["events"])

    table = result.timing.table()
    lines = table.splitlines()
    header = next(line for line in lines if line.startswith("module "))
    for column in LEGEND:  # every column is in the header and explained by one line under the table
        assert column in header
        assert sum(1 for line in lines if line.strip().startswith(column + " ")) == 1, column
    assert "wait ms/evt" not in table
    assert "events/s" in lines[0] and "peak RSS" in lines[0]
    row = next(line for line in lines if line.startswith("two "))
    assert row.split()[3:6] == [str(total), str(passing), str(total - passing)]


def test_cli_prints_the_report(nano_files, write_config, sonic_cli, tmp_path):
    config = _selection(write_config, nano_files[:1], min_count=2)
    result = sonic_cli("run", config, "--no-progress", "-o", tmp_path / "o.root", "--timing-json", tmp_path / "t.json",
                       check=True, timeout=120)
    report = json.loads((tmp_path / "t.json").read_text())
    two = next(m for m in report["modules"] if m["label"] == "two")
    assert f"{two['visited']:8d} {two['passed']:8d} {two['failed']:7d}" in result.stdout
    assert all(f"  {column}" in result.stdout for column in LEGEND)
