"""``sonic bench protodune`` on a tiny sample: every part runs and the report holds what it claims."""

from __future__ import annotations

import json

import pytest


@pytest.mark.triton
def test_bench_reports_modes_jobs_and_derived_numbers(sonic_cli, tmp_path):
    out = tmp_path / "bench"
    result = sonic_cli("bench", "protodune", "--out", out, "--scale", "small", "--events", "1",
                       "--modes", "direct-cpu,sonic-cpu", "--cpu-events", "1", "--threads", "1",
                       "--saturation", "1", "--job-events", "1", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "protodune.json").read_text())
    rows = {row["mode"]: row for row in report["modes"]}
    assert set(rows) == {"direct-cpu", "sonic-cpu"}
    assert all(row["ml_s_per_event"] > 0 for row in rows.values())
    assert rows["sonic-cpu"]["max_abs_diff_vs_direct_cpu"] <= 1e-5
    assert rows["sonic-cpu"]["server"]["executions"] >= 1 and rows["sonic-cpu"]["throughput_events_per_s"] > 0
    jobs = {job["mode"]: job for job in report["jobs"]}
    assert jobs["direct-cpu"]["inference_ms"] > 0 and jobs["sonic-cpu"]["preprocessing_ms"] > 0
    derived = report["derived"]
    hits = derived["hits_per_event"]
    assert derived["patch_gbit_per_event_uint8"] == pytest.approx(hits * 48 * 48 * 8 / 1e9)
    assert derived["network_limited_jobs_uint8"] == pytest.approx(4 * derived["network_limited_jobs_float32"])
    assert derived["sonic-cpu_jobs_per_server"] > 0
    assert (out / "protodune.md").read_text().startswith("# ProtoDUNE EmTrkMichelId benchmark")
    assert (out / "protodune.png").stat().st_size > 1000
