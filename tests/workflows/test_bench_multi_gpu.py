"""``sonic bench multi-gpu``'s judgement and report, from the run on four H200 kept with the docs (the measurement
itself needs GPUs: ``--device cpu`` is its dry run), and what a client counts as a lost or wrong event."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sonic_hep.workflows.bench import multi_gpu
from sonic_hep.workflows.bench._served_time import breakdown
from tests.conftest import PROJECT

RESULT = PROJECT / "docs" / "img" / "benchmarks" / "multi-gpu-h200x4.json"


def test_scaling_balance_and_the_kill_run_are_judged_from_the_servers_counts(tmp_path):
    report = json.loads(RESULT.read_text())
    summary = multi_gpu.summary(report)
    assert summary["speedup"][4] == pytest.approx(182.3 / 64.4, abs=0.01)
    assert summary["balance"][2] == pytest.approx(0.0, abs=0.01) and summary["balance"][4] == pytest.approx(0.134, abs=0.01)
    assert summary["kill"]["events"] == summary["kill"]["expected_events"] == 1920 and summary["kill"]["lost"] == 0
    assert summary["kill"]["balance_after_kill"] < 0.02
    report["summary"] = summary
    text = multi_gpu.markdown(report)
    assert "| 4 | 64 | 182.3 | 2.83 | 0.284 0.239 0.226 0.252 | 13.4 % |" in text
    assert "1920 of 1920; lost 0, wrong 0" in text
    multi_gpu.plot(report, tmp_path / "multi_gpu.png")
    assert (tmp_path / "multi_gpu.png").stat().st_size > 0


def test_a_dead_server_counts_for_no_share():
    assert multi_gpu.deviation([0.25, 0.25, 0.5]) == pytest.approx(0.5)
    shares = multi_gpu._shares([30.0, 10.0, math.nan])
    assert shares[:2] == [0.75, 0.25] and math.isnan(shares[2])


def test_an_event_is_wrong_when_its_scores_are_short_not_finite_or_moved():
    expected = {"em": np.zeros(4, np.float32)}
    assert multi_gpu._outputs_problem({"em": np.zeros(4, np.float32)}, expected, 4, 5e-3) == ""
    assert multi_gpu._outputs_problem({"em": np.zeros(3, np.float32)}, expected, 4, 5e-3) == "em: 3 rows of 4"
    assert multi_gpu._outputs_problem({"em": np.array([0, 0, np.nan, 0], np.float32)}, expected, 4, 5e-3) == \
        "em: not finite"
    assert "max |Δ| 1.0e-02" in multi_gpu._outputs_problem({"em": np.full(4, 0.01, np.float32)}, expected, 4, 5e-3)


def test_where_a_served_requests_time_goes():
    # 100 requests in 50 executions: each booked its execution's 8 ms (Triton books an execution to every request
    # it held), so the instances were busy 4 ms per request; 500 requests/s keep 2 instances busy
    before = {"requests": 0, "executions": 0, "queue_ns": 0, "compute_input_ns": 0, "compute_infer_ns": 0,
              "compute_output_ns": 0}
    after = {"requests": 100, "executions": 50, "queue_ns": 100 * 1e6, "compute_input_ns": 100 * 2e6,
             "compute_infer_ns": 100 * 5e6, "compute_output_ns": 100 * 1e6}
    out = breakdown(before, after, requests_per_s=500.0, latency_ms=12.0)
    assert (out["queue_ms"], out["input_ms"], out["execute_ms"], out["output_ms"]) == (1.0, 2.0, 5.0, 1.0)
    assert out["requests_per_execution"] == 2.0 and out["instance_ms_per_request"] == pytest.approx(4.0)
    assert out["instances_busy"] == pytest.approx(2.0) and out["outside_server_ms"] == pytest.approx(3.0)
    assert breakdown(before, before, 1.0, 1.0) == {}
