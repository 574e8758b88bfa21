"""``sonic plan`` counts only the time a job does NOT spend waiting on inference, reads the clients' byte
counters, draws the knee, and answers in JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from sonic_hep.workflows.grid.plan import measure, other_seconds, plan, predicted_time_per_event


def sonic_report(events: int = 10, wall_per_event: float = 5.73, wait_per_event: float = 5.68,
                 compute_s: float = 2.5, threads: int | None = 1, **models: dict) -> dict:
    """A SONIC job's timing report shaped as ``sonic run --timing-json`` writes it."""
    report = {"events": events, "wall_s": wall_per_event * events, "cpu_s": 0.4 * events,
              "modules": [{"label": "pre", "kind": "producer", "wall_ms_per_event": 40.0},
                          {"label": "ml", "kind": "external", "wall_ms_per_event": 8.0,
                           "wait_ms_per_event": 1000 * wait_per_event}],
              "inference": {"mode": "sonic", "models": models or {"m": {"requests": events, "rows": events}},
                            "servers": {"127.0.0.1:8001": {"m": {
                                "requests": events, "executions": events, "inferences": events, "queue_ns": 0,
                                "compute_input_ns": 0, "compute_infer_ns": int(compute_s * 1e9),
                                "compute_output_ns": 0}}}}}
    if threads is not None:
        report["threads"] = threads
    return report


def test_t_other_excludes_the_wait_on_inference(tmp_path):
    """The issue's case: 5.73 s per event, 5.68 s of it waiting on a server that 2 jobs saturate."""
    path = tmp_path / "job.json"
    path.write_text(json.dumps(sonic_report()))
    got = measure([path])
    assert got.other_s_per_event == pytest.approx(0.05)  # not the wall time, 5.73 s
    result = plan(got.other_s_per_event, got.server_s_per_event, None, latency_s_per_event=got.wait_s_per_event)
    assert got.server_s_per_event == pytest.approx(0.25)
    assert result.jobs_per_server == pytest.approx(0.2)  # was "22.9 : 1" with the wait counted as work
    assert result.knee_jobs_per_server == pytest.approx((0.05 + 5.68) / 0.25)


def test_module_time_is_spread_over_the_threads_that_ran_it():
    # several streams: waits overlap other streams' work, so wall - wait undercounts; the module time per
    # thread is the floor
    assert other_seconds(wall=10.0, wait=30.0, module_s=16.0, threads=4) == pytest.approx(4.0)
    assert other_seconds(wall=10.0, wait=2.0, module_s=16.0, threads=4) == pytest.approx(8.0)
    assert other_seconds(wall=10.0, wait=30.0, module_s=16.0) == pytest.approx(16.0)  # older reports: one thread


def test_a_report_without_threads_counts_one(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(sonic_report(wall_per_event=1.0, wait_per_event=2.0, threads=None)))
    assert measure([path]).other_s_per_event == pytest.approx(0.048)  # 40 + 8 ms of module time


def test_the_clients_byte_counters_fire(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(sonic_report(m={"requests": 20, "rows": 40, "bytes_sent": 3000, "bytes_received": 1000},
                                            n={"requests": 10, "rows": 10, "bytes_sent": 500, "bytes_received": 500})))
    got = measure([path])
    assert got.bytes_per_event == pytest.approx(500.0) and got.sent_fraction == pytest.approx(0.7)
    assert got.requests_per_event == {"m": 2.0, "n": 1.0}


def test_predicted_time_per_event_has_its_knee_where_the_plan_says():
    result = plan(1.0, 0.1, None, latency_s_per_event=0.1)
    jobs = np.arange(1, 31)
    times = predicted_time_per_event(jobs, 1.0, 0.1, 0.1)
    assert result.knee_jobs_per_server == pytest.approx(11.0)
    assert np.all(times[jobs <= 11] == pytest.approx(1.1)) and times[-1] == pytest.approx(3.0)
    assert predicted_time_per_event(30, 1.0, 0.1, 0.1, servers=3) == pytest.approx(1.1)


def test_plan_json_on_stdout(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(sonic_report(m={"requests": 10, "rows": 10, "bytes_sent": 8000, "bytes_received": 2000})))
    done = subprocess.run([sys.executable, "-m", "sonic_hep.workflows.cli", "plan", str(path), "--json", "--simulate",
                           "--jobs", "1", "4", "--events", "10"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)  # JSON alone: no text around it
    for key, kind in (("other_s_per_event", float), ("server_s_per_event", float), ("bytes_per_event", float),
                      ("jobs_per_server", float), ("knee_jobs_per_server", float), ("link_job_cap", int),
                      ("sources", dict), ("job_reports", list), ("measurement", dict), ("simulation", dict)):
        assert isinstance(document[key], kind), key
    assert document["sources"]["B"] == "job reports: inference byte counters"
    assert [run["scenario"]["jobs"] for run in document["simulation"]["runs"]] == [1, 4]
    assert document["simulation"]["settings"]["bytes_sent"] == pytest.approx(800.0)
    written = tmp_path / "plan.json"
    done = subprocess.run([sys.executable, "-m", "sonic_hep.workflows.cli", "plan", str(path), "--json", str(written)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "knee" in done.stdout  # the text on stdout, the JSON in the file
    assert json.loads(written.read_text())["knee_jobs_per_server"] == pytest.approx(document["knee_jobs_per_server"])
