"""The ``sonic`` command line end to end, in subprocesses, as a user runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import awkward as ak
import uproot


def test_run_end_to_end(tmp_path, nano_files, write_config, sonic_cli):
    cfg = write_config({"process": "e2e", "source": {"files": ["placeholder.root"]},
                        "modules": {"ht": {"type": "CollectionSum"},
                                    "two": {"type": "MinCountFilter", "min_pt": 40.0, "min_count": 2}},
                        "output": {"products": ["ht:sum"]}})
    out, timing = tmp_path / "out.root", tmp_path / "timing.json"
    result = sonic_cli("run", cfg, "--input", *nano_files, "--output", out, "--streams", "3", "--threads", "2",
                       "--timing-json", timing, "-p", "two.min_count=1", cwd=tmp_path, check=True)
    assert "events/s" in result.stdout and "ht" in result.stdout
    report = json.loads(timing.read_text())
    assert report["events"] == 240 and [m["label"] for m in report["modules"]] == ["ht", "two"]
    assert report["modules"][0]["calls"] == 240
    pt = ak.concatenate([uproot.open(f)["Events"]["Jet_pt"].array() for f in nano_files])
    expected = int(ak.sum(ak.sum(pt >= 40.0, axis=1) >= 1))
    assert 0 < expected < 240
    assert uproot.open(out)["Events"].num_entries == expected


def test_errors_are_one_line_and_exit_nonzero(tmp_path, write_config, sonic_cli):
    cfg = write_config({"modules": {"ht": {"type": "CollectionSumm"}}})
    result = sonic_cli("run", cfg, cwd=tmp_path)
    assert result.returncode == 1
    assert "did you mean 'CollectionSum'" in result.stderr and "Traceback" not in result.stderr


def test_describe(sonic_cli):
    result = sonic_cli("describe", "MinCountFilter", check=True)
    assert "min_count (int, default 1)" in result.stdout and "[input] src" in result.stdout
    listing = sonic_cli("describe", check=True)
    assert "CollectionSum" in listing.stdout and "SleepExternal" in listing.stdout


def test_graph_writes_dot_and_png(tmp_path, write_config, sonic_cli):
    cfg = write_config({"process": "g", "modules": {"sel": {"type": "SelectObjects"},
                                                    "h": {"type": "Histogram1D", "src": "sel:objects"}}})
    result = sonic_cli("graph", cfg, cwd=tmp_path, check=True)
    assert "1. sel" in result.stdout and "2. h" in result.stdout
    dot = (tmp_path / "g.dot").read_text()
    assert "digraph" in dot and "sel" in dot
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"


def test_sigint_stops_cleanly_without_output(tmp_path, write_config):
    cfg = write_config({"source": {"type": "empty", "events": 100000, "chunk_size": 10},
                        "modules": {"w": {"type": "SleepExternal", "ms": 20.0}},
                        "output": {"file": str(tmp_path / "out.root")}, "options": {"streams": 2, "threads": 1}})
    proc = subprocess.Popen([sys.executable, "-m", "sonic_hep.workflows.cli", "run", str(cfg), "--no-progress"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not any(p.name.startswith("out.root.tmp") for p in tmp_path.iterdir()):
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted after" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]
    assert os.path.exists(cfg)
