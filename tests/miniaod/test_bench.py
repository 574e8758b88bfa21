"""``sonic bench miniaod``: the per-module table for both modes in one run."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.triton


def test_bench_gives_per_module_table_for_direct_and_sonic(sonic_cli, small_file, tmp_path):
    result = sonic_cli("bench", "miniaod", "--input", small_file, "--out", tmp_path, check=True)
    report = json.loads((tmp_path / "miniaod.json").read_text())
    assert [run["mode"] for run in report["runs"]] == ["direct", "sonic"]
    for run in report["runs"]:
        assert run["events"] == 24 and run["event_ms"] > 0
        assert [m["label"] for m in run["modules"]] == ["pnetAK4", "pnetAK8", "deepMET", "deepTau"]
        assert all(m["ms_per_event"] > 0 and 0 < m["fraction"] for m in run["modules"])
    assert report["outputs_equal"], report["comparison"]
    # CMS's layouts give CMS-like input sizes per event: DeepMET 4500×11 floats, DeepTau ≈ 0.42 MB per τ
    assert report["input_mb"]["deepMET"] == pytest.approx(4500 * 11 * 4 / 1e6)
    assert report["input_mb"]["deepTau"] > report["input_mb"]["pnetAK4"] > report["input_mb"]["pnetAK8"]
    table = (tmp_path / "miniaod.md").read_text()
    assert "| pnetAK4 | ParticleNet | miniaod_particlenet_ak4 |" in table and "% of event" in table
    assert "direct ms/evt" in result.stdout and "sonic ms/evt" in result.stdout
