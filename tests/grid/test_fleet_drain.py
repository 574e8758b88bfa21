"""A server leaving a fleet under a running job: the job loses no request and no event; the server stops
cleanly, its work folder removed; the fleet's Prometheus stops scraping it. Everything is real: ``sonic fleet
start`` with two local server jobs and ``--prometheus local``, a ``sonic run --fleet`` job in a subprocess,
the autoscaler's own way of removing a server (``Fleet.retire``), ``sonic fleet stop``.

The unit test drives the quiet wait of the drain with a fake clock."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.request

import pytest
import uproot
from sonic_hep.workflows.grid.fleet import Fleet
from sonic_hep.workflows.grid.fleet_drain import wait_quiet

from tests.conftest import PROJECT
from tests.grid.test_fleet import paced_config, stop_and_check_nothing_left
from tests.polling import wait_for

DEMO = PROJECT / "data" / "models" / "demo"


def test_a_leaving_server_is_stopped_once_nothing_is_queued_or_completing_and_never_later_than_the_limit():
    now = [0.0]
    readings = iter([(0, 2), (3, 1), (7, 0), (9, 0), (9, 0), (9, 0), (9, 0), (9, 0), (9, 0), (9, 0)])

    def read():
        return next(readings)

    def sleep(seconds):
        now[0] += seconds

    quiet, answered = wait_quiet(read, limit_s=30, quiet_s=1.0, clock=lambda: now[0], sleep=sleep)
    assert quiet and answered == 9 and now[0] == pytest.approx(1.4, abs=0.25)  # quiet for 1 s from the reading at 0.4 s
    busy = iter([(i, 1) for i in range(1000)])  # always something queued
    quiet, answered = wait_quiet(lambda: next(busy), limit_s=5, clock=lambda: now[0], sleep=sleep)
    assert not quiet and answered > 0  # bounded: it stops anyway after the limit
    assert wait_quiet(lambda: None, limit_s=5, clock=lambda: now[0], sleep=sleep) == (False, 0.0)  # not answering


def test_notice_before_a_batch_systems_kill_can_be_asked_beside_the_gpus():
    """``-E 'extra=[--signal=B:TERM@120]'`` (a drain needs time before Slurm's KillWait runs out) is kept whole
    when ``--gpus-per-server`` adds its own sbatch option (it was split into letters)."""
    from sonic_hep.workflows.grid.executors import parse_key_values
    from sonic_hep.workflows.grid.fleet import executor_options

    for given in ("extra=[--signal=B:TERM@120]", "extra=--signal=B:TERM@120"):
        assert executor_options("slurm", parse_key_values([given]), gpus=1)["extra"] == \
            ["--signal=B:TERM@120", "--gres=gpu:1"]


def _answered(metrics: str) -> float:
    """Requests a server answered so far (its own /metrics)."""
    text = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5).read().decode()
    return sum(float(v) for v in re.findall(r'^nv_inference_request_success\{[^}]*\} (\S+)$', text, re.MULTILINE))


@pytest.mark.triton
@pytest.mark.timeout(300)
def test_a_server_drained_from_a_fleet_under_a_running_job_costs_no_request(tmp_path, sonic_cli):
    prometheus = shutil.which("prometheus") is not None
    fleet_dir, events = tmp_path / "fleet", 900
    config = paced_config(tmp_path / "paced.yaml", events, pace_ms=20.0)
    timing, output = tmp_path / "timing.json", tmp_path / "out.root"
    job = None
    try:
        sonic_cli("fleet", "start", fleet_dir, "-r", DEMO, "-m", "demo_mlp", "--servers", "2", "--min-servers", "1",
                  "--host", "127.0.0.1",
                  "--heartbeat-s", "1", "--ttl-s", "5", "--drain-s", "3", "--scale-interval-s", "1", "--wait",
                  "--timeout", "150", *(["--prometheus", "local", "--prometheus-scrape-s", "1"] if prometheus else []),
                  check=True)
        fleet = Fleet(fleet_dir)
        leaving = next(m for m in fleet.members() if m.index == 1).entry
        targets = fleet_dir / "prometheus" / "targets.json"
        if prometheus:  # the manager keeps the scrape targets in step with the directory
            wait_for(lambda: targets.exists() and len(json.loads(targets.read_text())) == 2, 30, "both targets")
        job = subprocess.Popen([sys.executable, "-m", "sonic_hep.workflows.cli", "run", str(config), "--fleet",
                                str(fleet_dir), "-o", str(output), "--timing-json", str(timing), "--no-progress"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        wait_for(lambda: _answered(leaving.metrics) >= 30 or job.poll() is not None, 120,
                 "the job to send requests to the server that will leave")
        assert job.poll() is None, "the job ended before the server left"
        fleet.retire(1)  # what the autoscaler's "down" does (above --min-servers: no replacement follows)
        wait_for(lambda: next(m for m in fleet.members() if m.index == 1).state == "done", 120,
                 "the server job to leave")
        _, stderr = job.communicate(timeout=180)
        assert job.returncode == 0, stderr[-3000:]
        report = json.loads(timing.read_text())
        demo = report["inference"]["models"]["demo_mlp"]
        assert report["events"] == events and uproot.open(output)["Events"].num_entries == events
        assert demo["failures"] == 0 and demo["calls"] > 0  # no request failed (events without jets make no call)
        assert {leaving.address} < set(demo["servers"])  # it served the job, and the job went on elsewhere
        log = fleet.task.files(1).log.read_text()
        assert "drained: quiet" in log, log[-2000:]
        assert re.search(r"Triton server stopped in [\d.]+ s, exit code 0, work folder removed", log), log[-2000:]
        if prometheus:
            wait_for(lambda: [g["labels"]["server"] for g in json.loads(targets.read_text())] == ["0000"], 30,
                     "the server that left to be dropped from the scrape targets")
        print(f"failovers {demo['failovers']}, retries {demo['retries']}; answers {demo['servers']}; "
              + "; ".join(line for line in log.splitlines() if "drained" in line or "stopped in" in line))
    finally:
        if job is not None and job.poll() is None:
            job.kill()
        if (fleet_dir / "fleet.json").exists():
            stop_and_check_nothing_left(sonic_cli, fleet_dir)
    assert not (fleet_dir / "prometheus" / "prometheus.json").exists()  # the fleet's Prometheus stopped with it
