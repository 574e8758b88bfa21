"""``sonic bench protodune`` on a tiny sample: every part runs and the report holds what it claims."""

from __future__ import annotations

import json

import numpy as np
import pytest
import uproot

from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.inference.fake import FakeClient, constant, model_info
from sonic_hep.framework.inference.repository import TensorSpec
from sonic_hep.modules.protodune.emtrkmichelid import SCORES
from sonic_hep.modules.protodune.patches import PatchSpec, make_patches
from sonic_hep.workflows.bench.protodune import MODEL, read_patches, run_event


@pytest.mark.triton
def test_bench_reports_modes_jobs_and_derived_numbers(sonic_cli, tmp_path):
    out = tmp_path / "bench"
    result = sonic_cli("bench", "protodune", "--out", out, "--scale", "small", "--events", "1",
                       "--modes", "direct-cpu,sonic-cpu", "--cpu-events", "1", "--ort-threads", "1",
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
    assert (out / "protodune.md").read_text().startswith("# sonic bench protodune: EmTrkMichelId\n\nCommand: `sonic bench protodune")
    assert (out / "protodune.png").stat().st_size > 1000


def test_bench_preprocessing_is_the_jobs_own_module(small_file):
    """read_patches runs the configured HitPatches (its parameters, its source columns), not a copy."""
    patches, seconds = read_patches(str(small_file), 2)
    assert len(patches) == len(seconds) == 2 and all(s > 0 for s in seconds)
    names = [f"Roi_{f}" for f in ("tpc", "plane", "wire", "start", "length")] + ["Adc"] + \
        [f"Hit_{f}" for f in ("tpc", "plane", "wire", "peak_tick")]
    with uproot.open(small_file) as file:
        arrays = file["Events"].arrays(names, entry_stop=2, library="np")
    params = cfgmod.load("protodune").modules["patches"].params
    spec = PatchSpec(drift_window=params["drift_window"], adc_max=params["adc_max"])
    for i, got in enumerate(patches):
        np.testing.assert_array_equal(got, make_patches(spec, *(arrays[name][i] for name in names)))


def test_bench_event_sends_the_modules_requests_and_gives_its_scores():
    info = model_info(MODEL, [TensorSpec("patches", "UINT8", (48, 48, 1))],
                      [TensorSpec("em_trk_none", "FP32", (3,)), TensorSpec("michel", "FP32", (1,))], max_batch_size=4)
    client = FakeClient().add(info, constant({"em_trk_none": [0.5, 0.25, 0.25], "michel": [0.125]}))
    out = run_event(client, np.zeros((10, 48, 48, 1), np.uint8), batch_size=4)
    assert [len(request["patches"]) for _, request in client.requests] == [4, 4, 2]
    assert set(out) == set(SCORES) and out["em"].tolist() == [0.25] * 10 and out["michel"].dtype == np.float32
    empty = run_event(client, np.zeros((0, 48, 48, 1), np.uint8), batch_size=4)  # an event without hits
    assert all(len(values) == 0 for values in empty.values()) and len(client.requests) == 3
