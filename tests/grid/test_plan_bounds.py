"""The planner's knee with its two bounds: the server's compute, and the host's cores when jobs
(and a CPU server) share them. Constructed timing records and closed forms; nothing is timed."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from sonic_hep.framework import Process
from sonic_hep.framework import config as cfgmod
from sonic_hep.workflows.grid.errors import GridError
from sonic_hep.workflows.grid.plan import measure, plan, predicted_time_per_event
from sonic_hep.workflows.grid.simulate import Scenario, knee, simulate
from tests.conftest import PROJECT


def test_host_bound_knee_is_the_time_alone_times_cores_over_cpu_per_event():
    # alone 62 ms (60 + 2), server 5 ms per event -> 12.4 jobs; host: 2 cores / (10 + 5) ms -> 8.27 jobs
    result = plan(0.060, 0.005, None, latency_s_per_event=0.002, cores=2, host_cpu_s_per_event=0.015)
    assert result.knee_jobs_per_server == pytest.approx(0.062 / 0.005)
    assert result.host_knee_jobs == pytest.approx(0.062 * 2 / 0.015)
    assert result.bound == "host" and result.knee_jobs == pytest.approx(result.host_knee_jobs)


def test_server_bound_when_the_server_saturates_first():
    result = plan(0.060, 0.010, None, latency_s_per_event=0.002, cores=16, host_cpu_s_per_event=0.015)
    assert result.bound == "server" and result.knee_jobs == pytest.approx(6.2)
    assert result.host_knee_jobs == pytest.approx(0.062 * 16 / 0.015)


def test_without_host_cores_only_the_server_bounds():
    result = plan(110.0, 1.6, None)
    assert result.host_knee_jobs is None and result.bound == "server"
    assert result.knee_jobs == pytest.approx((110.0 + 1.6) / 1.6)


def test_a_measured_zero_wait_is_not_replaced_by_the_server_time():
    # a job whose requests overlap its own work waits ~0 alone: the flat line is t_other, not t_other + t_server
    assert plan(0.060, 0.005, None, latency_s_per_event=0.0).knee_jobs_per_server == pytest.approx(12.0)


@pytest.mark.parametrize("cores, cpu", [(0, 0.01), (2, -0.01)])
def test_impossible_host_figures_are_refused(cores, cpu):
    with pytest.raises(GridError, match="cores|CPU"):
        plan(0.06, 0.005, None, cores=cores, host_cpu_s_per_event=cpu)


def test_the_curve_bends_at_the_knee_of_whichever_bound_binds():
    result = plan(0.060, 0.005, None, latency_s_per_event=0.002, cores=2, host_cpu_s_per_event=0.015)
    jobs = np.arange(1, 41, dtype=float)
    curve = predicted_time_per_event(jobs, 0.060, 0.002, 0.005, 1, 0.015, 2)
    assert np.all(curve[jobs <= result.knee_jobs] == pytest.approx(0.062))
    assert np.all(curve[jobs > result.knee_jobs] > 0.062)
    assert curve[-1] == pytest.approx(40 * 0.015 / 2)  # the host's asymptote, above the server's 40 x 5 ms
    # more servers move the server's asymptote, never the host's
    assert predicted_time_per_event(40.0, 0.060, 0.002, 0.005, 4, 0.015, 2) == pytest.approx(curve[-1])


def test_the_simulation_saturates_the_host_where_the_planner_says():
    """A CPU server on the jobs' two cores: the host gives at most 2 / (10 + 5 ms) = 133 events/s."""
    scenario = dict(other_s=0.060, cpu_s=0.010, service_s=0.005, cores=2, server_on_cores=True, events=60)
    assert knee(Scenario(jobs=1, **scenario)) == pytest.approx(0.065 * 2 / 0.015)
    loaded = simulate(Scenario(jobs=24, **scenario))
    assert loaded.events_per_s == pytest.approx(2 / 0.015, rel=0.03)
    alone = simulate(Scenario(jobs=1, **scenario))
    assert alone.time_per_event_median == pytest.approx(0.065)  # cores free: nothing waits for them


def test_the_server_sharing_the_cores_slows_with_them():
    """The same work with the server off the host: the host gives 2 / 10 ms, the server 1 / 5 ms."""
    off = simulate(Scenario(jobs=24, other_s=0.060, cpu_s=0.010, service_s=0.005, cores=2, events=60))
    on = simulate(Scenario(jobs=24, other_s=0.060, cpu_s=0.010, service_s=0.005, cores=2, server_on_cores=True,
                           events=60))
    assert off.events_per_s == pytest.approx(200.0, rel=0.03)
    assert on.events_per_s < 0.75 * off.events_per_s


def test_processor_sharing_splits_the_cores_among_runnable_work():
    """Three jobs of 30 ms CPU each started together on one core finish together after 90 ms (time-sliced),
    not one after another at 30 / 60 / 90 ms."""
    result = simulate(Scenario(jobs=3, other_s=0.030, cpu_s=0.030, service_s=0.0, cores=1, events=2, warmup=1,
                               stagger=False))
    assert result.time_per_event_median == pytest.approx(0.090)
    assert result.time_per_event_p90 == pytest.approx(0.090)


def test_sonic_plan_reports_the_bound(tmp_path):
    """``--host-cores`` with a job report: the job's CPU per event from its report, plus the server's compute
    with ``--server-on-host``."""
    events = 10
    report = {"events": events, "wall_s": 0.062 * events, "cpu_s": 0.008 * events, "threads": 1,
              "modules": [{"label": "work", "kind": "producer", "wall_ms_per_event": 60.0},
                          {"label": "ml", "kind": "external", "wall_ms_per_event": 0.0, "wait_ms_per_event": 2.0}],
              "inference": {"mode": "sonic", "models": {"m": {"requests": events, "rows": events}},
                            "servers": {"127.0.0.1:8001": {"m": {
                                "requests": events, "executions": events, "inferences": events, "queue_ns": 0,
                                "compute_input_ns": 0, "compute_infer_ns": int(0.005 * events * 1e9),
                                "compute_output_ns": 0}}}}}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(report))
    done = subprocess.run([sys.executable, "-m", "sonic_hep.workflows.cli", "plan", str(path), "--json",
                           "--host-cores", "2", "--server-on-host"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["host_cpu_s_per_event"] == pytest.approx(0.013)
    assert document["bound"] == "host" and document["knee_jobs"] == pytest.approx(0.062 * 2 / 0.013)
    done = subprocess.run([sys.executable, "-m", "sonic_hep.workflows.cli", "plan", str(path), "--host-cores", "2"],
                          capture_output=True, text=True, timeout=120)
    # its CPU elsewhere: the host gives 2 / 8 ms (15.5 jobs), the server 1 / 5 ms first (12.4 jobs)
    assert done.returncode == 0 and "knee at 12.4 jobs per server: the server saturates first" in done.stdout


def test_a_run_records_its_cpu_after_the_first_event(tmp_path):
    """A short job measured for planning: its first event carries the start-up (connections, model
    metadata, first allocations) that a production job amortises; the timing report keeps the clocks
    after it, and the planner's CPU per event comes from there."""
    timing = tmp_path / "timing.json"
    cfg = cfgmod.load(PROJECT / "configs" / "demo_inference.yaml",
                      ["source.events=12", "source.chunk_size=1", "output.file=null", "options.streams=1",
                       "options.threads=1"])
    Process(cfg).run(timing_json=str(timing), progress=False)
    report = json.loads(timing.read_text())
    steady = report["after_first_event"]
    assert steady["events"] == 11
    assert 0 < steady["cpu_s"] <= report["cpu_s"] and 0 < steady["wall_s"] <= report["wall_s"]
    assert measure([timing]).cpu_s_per_event == pytest.approx(steady["cpu_s"] / 11)


def test_reports_without_the_mark_count_every_event(tmp_path):
    base = {"events": 10, "wall_s": 1.0, "cpu_s": 0.5, "modules": [], "threads": 1}
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(base))
    new.write_text(json.dumps({**base, "after_first_event": {"events": 9, "wall_s": 0.9, "cpu_s": 0.27}}))
    assert measure([old]).cpu_s_per_event == pytest.approx(0.05)
    assert measure([new]).cpu_s_per_event == pytest.approx(0.03)
    assert measure([old, new]).cpu_s_per_event == pytest.approx((0.5 + 0.27) / 19)


def test_overlapping_waits_do_not_lengthen_the_time_alone(tmp_path):
    """Two producers whose requests are in flight together, each waiting 10 ms, in an event of 62 ms of
    which 60 ms is module work: alone the job takes 62 ms, not 60 + 20."""
    events = 10
    report = {"events": events, "wall_s": 0.062 * events, "cpu_s": 0.008 * events, "threads": 1,
              "modules": [{"label": "work", "kind": "producer", "wall_ms_per_event": 60.0},
                          {"label": "a", "kind": "external", "wall_ms_per_event": 0.0, "wait_ms_per_event": 10.0},
                          {"label": "b", "kind": "external", "wall_ms_per_event": 0.0, "wait_ms_per_event": 10.0}],
              "inference": {"mode": "sonic", "models": {"m": {"requests": 2 * events, "rows": 2 * events}}}}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(report))
    done = subprocess.run([sys.executable, "-m", "sonic_hep.workflows.cli", "plan", str(path), "--json",
                           "--server-ms-per-event", "5"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["latency_s_per_event"] == pytest.approx(0.002)
    assert document["knee_jobs_per_server"] == pytest.approx(0.062 / 0.005)
