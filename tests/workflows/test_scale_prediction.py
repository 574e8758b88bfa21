"""The scale benchmark's prediction from its one-job point: constructed points, no server, no timing.

What a coordinator measures with one job — its time per event alone, its CPU per event, the server's CPU
per event, the host's cores — must give the planner's knee and name the bound that sets it, and the
measured knee must be read off the curve with the same construction.
"""

from __future__ import annotations

import argparse

import pytest

from sonic_hep.workflows.bench.scale import knee_for, measured_knee, predictions


def point(jobs: int, time_per_event: float, events_per_s: float, **extra) -> dict:
    row = {"jobs": jobs, "servers": 1, "repository": "unused", "time_per_event_median": time_per_event,
           "events_per_s": events_per_s, "other_s_per_event": 0.060, "client_cpu_s_per_event": 0.010,
           "server_cpu_s_per_event": 0.005, "server_compute_s_per_event": 0.005, "bytes_per_event": 1000.0,
           "sent_fraction": 0.9, "requests_per_event": 1.0}
    return {**row, **extra}


def arguments(device: str = "cpu") -> argparse.Namespace:
    return argparse.Namespace(server_instances=1, device=device, sim_service_cv=0.0, events=30, warmup=3)


def test_a_cpu_server_on_two_cores_is_host_bound():
    points = [point(1, 0.062, 16.1), point(4, 0.062, 64.5), point(16, 0.12, 133.0,
                                                                  server_compute_s_per_event=0.02)]
    pred = predictions(points, arguments(), cores=2)
    assert pred["alone_s"] == pytest.approx(0.062) and pred["t_ml_s"] == pytest.approx(0.002)
    assert pred["host_cpu_s_per_event"] == pytest.approx(0.015)  # the job's 10 ms + the server's 5 ms
    assert pred["host_knee_jobs"] == pytest.approx(0.062 * 2 / 0.015)
    # a CPU server's bound from its compute with one job: under load its wall time counts waiting for cores
    assert pred["t_server_s"] == pytest.approx(0.005) and pred["knee_jobs_per_server"] == pytest.approx(12.4)
    assert pred["bound"] == "host" and knee_for(pred, 1) == pytest.approx(pred["host_knee_jobs"])
    assert knee_for(pred, 4) == pytest.approx(pred["host_knee_jobs"])  # more servers do not free the cores
    settings = pred["simulation_settings"]
    assert settings["server_on_cores"] and settings["cores"] == 2 and settings["cpu_s"] == pytest.approx(0.010)
    assert points[0]["simulated_time_per_event_median"] == pytest.approx(0.062)  # alone: the measured time


def test_a_gpu_server_is_bound_by_its_loaded_compute():
    points = [point(1, 0.30, 3.3, client_cpu_s_per_event=0.0, server_cpu_s_per_event=None,
                    server_compute_s_per_event=0.009),
              point(100, 0.30, 330.0, client_cpu_s_per_event=0.0, server_cpu_s_per_event=None,
                    server_compute_s_per_event=0.0025),
              point(200, 0.45, 440.0, client_cpu_s_per_event=0.0, server_cpu_s_per_event=None,
                    server_compute_s_per_event=0.0023)]
    pred = predictions(points, arguments("gpu"), cores=16)
    assert pred["t_server_s"] == pytest.approx(0.0024)  # the median of the loaded points
    assert pred["host_knee_jobs"] is None and pred["bound"] == "server"
    assert pred["knee_jobs"] == pytest.approx(0.30 / 0.0024)


def test_measured_knee_uses_the_same_construction():
    points = [point(1, 0.062, 16.1), point(4, 0.062, 64.5), point(8, 0.09, 90.0), point(16, 0.18, 89.0)]
    knee = measured_knee(points, 1)
    assert knee["knee_jobs"] == pytest.approx(0.062 * 90.0) and knee["saturated"]
