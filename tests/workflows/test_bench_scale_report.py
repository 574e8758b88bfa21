"""``sonic bench scale``'s report for every combination of ``--jobs`` and ``--servers``: with or without the
one-job, one-server point the prediction and simulation start from, with one server or several (balance), with
a failed point. Built from measured-looking points, no servers; what is checked is that the page, the JSON and
the figure are written and say what was measured, whatever the combination."""

from __future__ import annotations

import argparse
import itertools
import json

import pytest

from sonic_hep.workflows.bench import scale

#: one point as measure_point returns it (a 2-job, 2-server run of the demo workflow, rounded)
POINT = {"servers": 2, "jobs": 2, "events": 12, "seconds": 0.75, "repository": "data/models/demo",
         "time_per_event_median": 0.0034, "time_per_event_p90": 0.0041, "events_per_s": 693.6,
         "queue_ms_per_request": 0.028, "compute_ms_per_request": 0.04, "requests_per_event": 1.0,
         "server_share": [0.5, 0.5], "server_requests": [6, 6], "executions_per_request": 1.0,
         "server_compute_s_per_event": 4.0e-05, "cpu_percent": 100.0, "server_cpu_percent": [0.0, 1.3],
         "gpu_percent": None, "bytes_per_event": 520.0, "sent_fraction": 0.8, "wire_mb_per_s": 0.36,
         "shm_mb_per_s": 0.0, "other_s_per_event": 0.005, "wait_s_per_event": 0.0022,
         "client_cpu_s_per_event": 0.002, "client_cpu_cv": 0.11}


def point(servers: int, jobs: int) -> dict:
    return {**POINT, "servers": servers, "jobs": jobs, "server_share": [1 / servers] * servers,
            "server_requests": [6] * servers, "server_cpu_percent": [1.0] * servers,
            "time_per_event_median": 0.0034 * (1 + jobs / 8), "events_per_s": 290.0 * jobs}


@pytest.mark.parametrize("jobs, servers", list(itertools.product([[1], [32], [1, 32]], [[1], [2], [1, 2]])))
def test_every_combination_of_jobs_and_servers_is_reported(tmp_path, jobs, servers):
    args = argparse.Namespace(workflow="demo", jobs=jobs, servers=servers, events=6, warmup=2, other_ms=0.0,
                              other_kind="sleep", device="gpu", shared_memory="off", server_instances=1,
                              sim_service_cv=0.0)
    points = [point(s, n) for s in servers for n in jobs]
    report = {"machine": "test", "command": "sonic bench scale", "date": "today", "cores": 2, "input": "toy jets",
              "arguments": vars(args), "server_backends": {}, "points": points,
              "prediction": scale.predictions(points, args, 2), "failures": {"2 servers, 64 jobs": "RuntimeError: x"},
              "knees": [k for k in (scale.measured_knee(points, s) for s in servers) if k]}
    text = scale.markdown(report)
    assert text.count("\n| ") == len(points) + 1  # the header and one row per point
    assert ("balance" in text) == (max(servers) > 1)
    assert ("predicted by `sonic plan`" in text) == (1 in jobs and 1 in servers)  # only from the N=1 point
    scale.plot_figure(report, tmp_path / "scale.png")
    assert (tmp_path / "scale.png").stat().st_size > 0
    json.dumps(report, default=str)
