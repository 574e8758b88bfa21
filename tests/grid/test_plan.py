"""``sonic plan``: the seeds' arithmetic, and the measurements it reads from real timing reports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import uproot

from sonic_hep.framework import Process
from sonic_hep.framework import config as cfgmod
from sonic_hep.workflows.grid.errors import GridError
from sonic_hep.workflows.grid.plan import bytes_from_repository, measure, plan
from tests.conftest import PROJECT

REPOSITORY = PROJECT / "data" / "models" / "demo"


def test_the_seeds_numbers_follow_from_the_formulas():
    protodune = plan(110.0, 1.6, None)  # ~110 s of non-ML CPU per event, ~1.6 s of GPU per event
    assert protodune.jobs_per_server == pytest.approx(68.75) and protodune.link_job_cap is None
    assert any("--bytes-per-event" in note for note in protodune.notes)
    # a job sending B bytes per event every 110 s: 600 such jobs fill 80% of 100 Gb/s when B = 1.83 GB
    capped = plan(110.0, 1.6, bytes_per_event=0.8 * 100e9 / 8 * 110 / 600, link_gbps=100, link_utilisation=0.8)
    assert capped.link_job_cap == 600 and capped.servers_for_link_cap == 9  # ceil(600 / 68.75)
    half = plan(110.0, 1.6, None, server_utilisation=0.5)
    assert half.jobs_per_server_at_target == pytest.approx(68.75 / 2)
    with pytest.raises(GridError):
        plan(0.0, 1.0, None)


def test_measurement_from_a_direct_run(tmp_path):
    timing, output = tmp_path / "timing.json", tmp_path / "out.root"
    cfg = cfgmod.load(PROJECT / "configs" / "demo_inference.yaml",
                      ["source.events=60", f"output.file={output}", "options.streams=1", "options.threads=1"])
    Process(cfg).run(timing_json=str(timing), progress=False)
    report = json.loads(timing.read_text())
    got = measure([timing])
    assert got.events == 60 and got.mode == "direct" and got.server_s_per_event is None
    in_calls = report["inference"]["models"]["demo_mlp"]["seconds"]
    assert got.inference_s_per_event == pytest.approx(in_calls / 60)
    module_s = sum(m["wall_ms_per_event"] for m in report["modules"]) / 1000
    wait_s = sum(m.get("wait_ms_per_event", 0.0) for m in report["modules"]) / 1000
    assert got.wait_s_per_event == pytest.approx(wait_s) and wait_s > 0
    assert got.other_s_per_event == pytest.approx(max(report["wall_s"] / 60 - wait_s, module_s))
    jets = int(uproot.open(output)["Events"]["nToyJet"].array(library="np").sum())
    assert got.rows_per_event == {"demo_mlp": pytest.approx(jets / 60)}
    assert bytes_from_repository(got.rows_per_event, [str(REPOSITORY)])[0] == pytest.approx(jets / 60 * 96)
    # the direct client counts what its requests would carry: x (16 float32) in, the "probs" the tagger asks
    # for (4 float32) out; the repository's shapes count every output ("logits" too), an upper bound
    report_models = report["inference"]["models"]["demo_mlp"]
    assert report_models["bytes_sent"] == jets * 16 * 4 and report_models["bytes_received"] == jets * 4 * 4
    assert got.bytes_per_event == pytest.approx(jets / 60 * 80) and got.sent_fraction == pytest.approx(0.8)

    twice = measure([timing, timing])  # several reports: per-event figures are averages over all events
    assert twice.events == 120 and twice.other_s_per_event == pytest.approx(got.other_s_per_event)


def test_unusable_reports_are_named(tmp_path):
    (tmp_path / "empty.json").write_text(json.dumps({"events": 0, "wall_s": 0.0}))
    with pytest.raises(GridError, match="empty.json is not a timing report"):
        measure([tmp_path / "empty.json"])
    with pytest.raises(GridError, match="no done job"):
        measure([tmp_path])


def test_a_shipped_repository_is_found_from_any_directory(tmp_path):
    """``--repository data/models/demo`` names the shipped repository, as configurations do, outside the checkout."""
    timing = tmp_path / "timing.json"
    cfg = cfgmod.load(PROJECT / "configs" / "demo_inference.yaml",
                      ["source.events=10", f"output.file={tmp_path / 'out.root'}", "options.streams=1",
                       "options.threads=1"])
    Process(cfg).run(timing_json=str(timing), progress=False)
    report = json.loads(timing.read_text())
    for counters in report["inference"]["models"].values():  # a report of a client that counted no bytes
        for key in ("bytes_sent", "bytes_received", "shm_bytes"):
            counters.pop(key)
    timing.write_text(json.dumps(report))
    result = subprocess.run([sys.executable, "-m", "sonic_hep.workflows.cli", "plan", str(timing),
                             "--repository", "data/models/demo"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "rows per event x bytes per row of demo_mlp" in result.stdout
