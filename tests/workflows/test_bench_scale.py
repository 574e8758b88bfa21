"""``sonic bench scale`` end to end: real client processes, real Triton servers, demo models.

Small on purpose (N in {1, 2}, one and two servers, a few events): what is checked is that every point is
measured from the jobs' own traces and the servers' own statistics, that the SONIC client's byte counters
reach the report, that two servers share the requests evenly, and that the planner's prediction and the
simulation are drawn with the measurement. No timing is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.triton, pytest.mark.slow]


def test_scale_bench_on_demo_models(tmp_path):
    out = tmp_path / "scale"
    done = subprocess.run([sys.executable, "-m", "sonic_hep.workflows.cli", "bench", "scale", "--workflow", "demo",
                           "--jobs", "1", "2", "--servers", "1", "2", "--events", "8", "--other-ms", "20",
                           "--shared-memory", "off", "--out", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((out / "scale.json").read_text())
    assert report["failures"] == {}
    assert sorted((p["servers"], p["jobs"]) for p in report["points"]) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    for point in report["points"]:
        assert point["events"] == 8 * point["jobs"]  # every job ran every event (its timing report says so)
        assert 0 < point["time_per_event_median"] <= point["time_per_event_p90"]
        assert point["events_per_s"] > 0 and point["requests_per_event"] == pytest.approx(1.0)
        # toy jets: one request per event of (jets x 16 float32) in, (jets x 4 float32) out, all in the message
        assert point["bytes_per_event"] > 0 and point["sent_fraction"] == pytest.approx(0.8)
        assert point["shm_mb_per_s"] == 0 and point["wire_mb_per_s"] > 0
        assert sum(point["server_share"]) == pytest.approx(1.0)
        assert "simulated_time_per_event_median" in point and "predicted_time_per_event" in point
    two = next(p for p in report["points"] if p["servers"] == 2 and p["jobs"] == 2)
    assert all(abs(share - 0.5) <= 0.05 for share in two["server_share"]), two["server_share"]  # balanced
    assert report["prediction"]["knee_jobs_per_server"] > 0
    assert (out / "scale.png").stat().st_size > 0
    text = (out / "scale.md").read_text()
    assert "Knee" in text and "balance" in text
