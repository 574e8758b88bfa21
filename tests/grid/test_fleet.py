"""Fleets: the autoscaler's rule with a fake clock, and whole fleets end to end — Triton servers as Slurm,
local and Dask jobs, client jobs finding them through the fleet directory, a server job cancelled mid-run,
the autoscaler adding a server under load and removing an idle one, and nothing left after ``fleet stop``.

End to end everything is real: the Slurm of the session fixture, ``tritonserver`` processes, ``sonic``
commands in subprocesses. Client jobs are paced (an external wait per event) so that they are still running
when a server job is cancelled; whether they were is checked from their records, never from durations.
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import uproot
import yaml

from sonic_hep.workflows.grid.errors import GridError
from sonic_hep.workflows.grid.fleet import Fleet
from sonic_hep.workflows.grid.fleet_autoscale import Autoscaler, Rule, Sample
from sonic_hep.workflows.grid.merge import merge
from sonic_hep.workflows.grid.status import wait
from sonic_hep.workflows.grid.task import Task
from tests.conftest import PROJECT
from tests.grid.conftest import drivers_gone, single_run
from tests.polling import gone, processes_mentioning, wait_for
from tests.reliability.test_exposure import pki  # noqa: F401 - the fixture: a CA, server and client certificates

DEMO = PROJECT / "data" / "models" / "demo"


# -- the rule, with a fake clock -------------------------------------------------------------------------
def test_grows_only_after_the_queue_stayed_above_the_threshold_for_the_window():
    scaler = Autoscaler(Rule(min_servers=1, max_servers=3, threshold_ms=5, window_s=30, idle_s=100))
    busy = {"0000": 50, "0001": 40}
    assert scaler.decide(0, Sample(8.0, busy)).action == "hold"
    assert scaler.decide(20, Sample(9.0, busy)).action == "hold"
    assert scaler.decide(25, Sample(4.0, busy)).action == "hold"  # dipped below: the window starts again
    assert scaler.decide(30, Sample(6.0, busy)).action == "hold"
    assert scaler.decide(59, Sample(6.0, busy)).action == "hold"
    up = scaler.decide(60, Sample(6.5, busy))
    assert (up.action, up.queue_ms, up.servers) == ("up", 6.5, 2) and "for 30 s" in up.reason
    assert scaler.decide(61, Sample(7.0, busy)).action == "hold"  # the next one only after another window
    starting = scaler.decide(91, Sample(7.0, busy, starting=1))
    assert starting.action == "hold" and "starting" in starting.reason  # one server at a time


def test_never_above_max_and_replaces_below_min():
    scaler = Autoscaler(Rule(min_servers=2, max_servers=2, threshold_ms=1, window_s=0, idle_s=100))
    at_max = scaler.decide(0, Sample(50.0, {"0000": 9, "0001": 9}))
    assert at_max.action == "hold" and "at max 2" in at_max.reason
    lost = scaler.decide(1, Sample(None, {"0001": 0}))
    assert lost.action == "up" and "1 running + 0 starting < min 2" in lost.reason
    assert scaler.decide(2, Sample(None, {"0001": 0}, starting=1)).action == "hold"


def test_shrinks_an_idle_server_not_a_busy_one_and_not_below_min():
    scaler = Autoscaler(Rule(min_servers=1, max_servers=3, threshold_ms=5, window_s=10, idle_s=60))
    assert scaler.decide(0, Sample(1.0, {"0000": 10, "0001": 0, "0002": 0})).action == "hold"
    assert scaler.decide(59, Sample(1.0, {"0000": 10, "0001": 0, "0002": 3})).action == "hold"
    down = scaler.decide(60, Sample(1.0, {"0000": 10, "0001": 0, "0002": 0}))
    assert (down.action, down.server) == ("down", "0001") and "answered no request for 60 s" in down.reason
    assert scaler.decide(61, Sample(1.0, {"0000": 10, "0002": 0})).action == "hold"  # 0002 idle only since 60
    assert scaler.decide(119, Sample(None, {"0000": 0, "0002": 0})).action == "hold"
    down = scaler.decide(120, Sample(None, {"0000": 0, "0002": 0}))
    assert (down.action, down.server) == ("down", "0002")
    assert scaler.decide(500, Sample(None, {"0000": 0})).action == "hold"  # at min


def test_no_shrinking_while_the_queue_is_above_the_threshold():
    scaler = Autoscaler(Rule(min_servers=1, max_servers=2, threshold_ms=5, window_s=1000, idle_s=10))
    scaler.decide(0, Sample(20.0, {"0000": 5, "0001": 0}))
    assert scaler.decide(50, Sample(20.0, {"0000": 5, "0001": 0})).action == "hold"


def test_replacements_that_keep_failing_back_off_exponentially_capped_and_reset_when_one_joins():
    scaler = Autoscaler(Rule(min_servers=1, max_servers=1, backoff_s=10, backoff_max_s=35))
    assert scaler.decide(0, Sample(None, {"0000": 0})).action == "hold"
    first = scaler.decide(5, Sample(None, {}, failed=1, last_failure="server job 0: cancelled"))
    assert first.action == "up"  # one failure (a cancelled server): replaced at once
    assert scaler.decide(6, Sample(None, {}, starting=1, failed=1)).action == "hold"
    t, waits = 10.0, []
    for failed in (2, 3, 4, 5):  # each replacement fails before it registers
        why = "server job 1: cannot write its entry in /fleet for 60 s"
        held = scaler.decide(t, Sample(None, {}, failed=failed, last_failure=why))
        assert held.action == "backoff" and held.retry_in_s > 0
        assert f"{failed} server jobs failed in a row (last: {why})" in held.reason and "< min 1" in held.reason
        again = scaler.decide(t + held.retry_in_s - 0.5, Sample(None, {}, failed=failed))
        assert again.action == "hold" and "backoff" in again.reason  # said once, held until the time comes
        assert scaler.decide(t + held.retry_in_s, Sample(None, {}, failed=failed)).action == "up"
        waits.append(held.retry_in_s)
        t += held.retry_in_s + 1
    assert waits == [10, 20, 35, 35]  # doubling, capped
    assert scaler.decide(t, Sample(None, {"0006": 0}, failed=5)).action == "hold"  # one registered: success
    assert scaler.decide(t + 1, Sample(None, {}, failed=6)).action == "up"  # a failure after it: replaced at once


def test_adding_under_load_backs_off_too():
    scaler = Autoscaler(Rule(min_servers=1, max_servers=3, threshold_ms=1, window_s=0, backoff_s=10))
    busy = {"0000": 9}
    scaler.decide(0, Sample(50.0, busy))
    assert scaler.decide(1, Sample(50.0, busy, failed=1)).action == "up"
    held = scaler.decide(2, Sample(50.0, busy, failed=2))
    assert held.action == "backoff" and "queue 50.000 ms/request > 1" in held.reason and held.retry_in_s == 10
    assert scaler.decide(12, Sample(50.0, busy, failed=2)).action == "up"


def test_failures_before_the_manager_started_do_not_hold_it_back():
    scaler = Autoscaler(Rule(min_servers=2, max_servers=2))
    assert scaler.decide(0, Sample(None, {"0007": 0}, failed=7)).action == "up"


def test_bad_backoff_is_one_line():
    with pytest.raises(GridError, match=r"0 <= backoff_s \(30\) <= backoff_max_s \(10\)"):
        Rule(backoff_s=30, backoff_max_s=10)


def test_a_server_that_cannot_write_its_entry_keeps_serving_and_leaves_only_after_the_grace(tmp_path, caplog):
    from sonic_hep.framework.inference.serving.fleet_directory import Entry, live_entries, register
    from sonic_hep.workflows.grid.fleet_member import Heartbeat

    now, broken = [0.0], [False]

    def write(directory, entry):  # the one function that writes heartbeats, failing on demand
        if broken[0]:
            raise PermissionError(13, "Permission denied", str(directory / "servers"))
        return register(directory, entry)

    beat = Heartbeat(tmp_path, Entry(name="0000", address="127.0.0.1:1"), grace_s=60.0, clock=lambda: now[0],
                     write=write)
    with caplog.at_level(logging.INFO, logger="sonic_hep.workflows.grid.fleet_member"):
        assert beat.beat() == "" and [e.name for e in live_entries(tmp_path)] == ["0000"]
        broken[0] = True
        for now[0] in (5.0, 10.0, 64.9):  # every heartbeat retries; under the grace it stays
            assert beat.beat() == ""
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and f"cannot write its entry in {tmp_path}: [Errno 13] Permission denied" in \
            warnings[0] and "keeps serving" in warnings[0]
        broken[0], now[0] = False, 70.0  # the directory is back: advertised again, the grace starts anew
        assert beat.beat() == "" and "advertised again" in caplog.records[-1].getMessage()
        assert live_entries(tmp_path)[0].heartbeat > 0
        broken[0] = True
        now[0] = 80.0
        assert beat.beat() == ""
        now[0] = 139.9
        assert beat.beat() == ""
        now[0] = 140.0
        why = beat.beat()
    assert why.startswith(f"cannot write its entry in {tmp_path} for 60 s (limit 60 s): [Errno 13]"), why


def test_the_metric_is_the_fleets_queue_time_per_request_over_the_interval(monkeypatch):
    from sonic_hep.framework.inference.serving.fleet_directory import Entry
    from sonic_hep.framework.inference.triton_errors import RequestError
    from sonic_hep.workflows.grid import fleet_manager
    from sonic_hep.workflows.grid.fleet import Member

    counters = {"a:1": [0, 0], "b:2": [100, 7_000_000]}  # cumulative requests, queue ns (Triton's statistics)
    down: set[str] = set()

    class Connection:  # Triton's statistics API, as ServerConnection gives it
        def __init__(self, spec):
            self.address = spec.address

        def statistics(self):
            if self.address in down:
                raise RequestError("*", self.address, "DEADLINE_EXCEEDED", "no answer", "retry")
            requests, queue_ns = counters[self.address]
            return {("m", "1"): {"requests": requests, "queue_ns": queue_ns}}

        def close(self, grace_s=0.0):
            pass

    class FakeFleet:
        def members(self):
            return [Member(0, "running", entry=Entry("0000", "a:1")), Member(1, "running", entry=Entry("0001", "b:2")),
                    Member(2, "pending"), Member(3, "running", entry=Entry("0003", "c:3"), stopping=True),
                    Member(4, "failed", "terminated by SIGTERM\nmore"), Member(5, "failed", "no Triton server")]

    monkeypatch.setattr(fleet_manager, "ServerConnection", Connection)
    sampler = fleet_manager.Sampler()
    first = sampler.sample(FakeFleet())  # the baseline: nothing answered *in the interval* yet
    assert (first.queue_ms, first.requests, first.starting) == (None, {"0000": 0, "0001": 0}, 1)
    assert (first.failed, first.last_failure) == (2, "server job 5: no Triton server")  # the backoff's witnesses
    counters["a:1"] = [10, 50_000_000]  # 10 requests waited 50 ms in all
    counters["b:2"] = [130, 37_000_000]  # 30 more waited 30 ms
    second = sampler.sample(FakeFleet())
    assert second.queue_ms == pytest.approx(80 / 40) and second.requests == {"0000": 10, "0001": 30}
    down.add("b:2")  # statistics late: counted as running, not idle
    assert sampler.sample(FakeFleet()).requests == {"0000": 0, "0001": -1}


def test_stop_removes_the_entry_a_killed_server_job_left(tmp_path):
    from sonic_hep.framework.inference.serving.fleet_directory import Entry, read_entries, register
    from sonic_hep.workflows.grid.fleet import FleetSpec
    from sonic_hep.workflows.grid.records import JobReport, Submission

    fleet = Fleet.create(tmp_path / "fleet", FleetSpec([str(DEMO)]), 1)
    files = fleet.task.files(0)
    Submission(attempt=1, executor="local", batch_id="local:999999@elsewhere").save(files.submission)
    JobReport(attempt=1, state="failed", reason="killed").save(files.report)  # as the driver records a SIGKILL
    register(fleet.directory, Entry(name="0000", address="127.0.0.1:1", pid=999999, host="elsewhere"))
    assert [m.state for m in fleet.stop(timeout=5)] == ["failed"]
    assert read_entries(fleet.directory) == [] and fleet.stopping


def test_bad_bounds_are_one_line():
    with pytest.raises(GridError, match=r"--min-servers \(3\) <= --max-servers \(2\)"):
        Rule(min_servers=3, max_servers=2)


@pytest.mark.parametrize("args, culprit", [
    (["run", "demo_inference", "-n", "5", "-o", "x.root", "--fleet", "{tmp}/none"],
     r"services\.inference\.fleet: '.*/none' is not a fleet directory \(no fleet\.json\)"),
    (["submit", "demo_inference", "-d", "{tmp}/task", "--fleet", "{tmp}"], r"'.*' is not a fleet directory"),
    (["fleet", "status", "{tmp}"], r"is not a fleet directory \(no fleet\.json\); start one with"),
    (["fleet", "start", "{tmp}/f", "-r", str(DEMO), "--min-servers", "3", "--max-servers", "2"],
     r"--min-servers \(3\) <= --max-servers \(2\)"),
    (["fleet", "start", "{tmp}/f", "-r", str(DEMO), "-x", "slurm", "-E", "bogus=1"],
     r"executor 'slurm' has no option 'bogus'"),
    (["fleet", "start", "{tmp}/f", "-r", str(DEMO), "--heartbeat-s", "5", "--ttl-s", "5"],
     r"--ttl-s \(5\.0\) must exceed --heartbeat-s"),
])
def test_bad_fleet_inputs_are_one_line_and_write_nothing(tmp_path, sonic_cli, args, culprit):
    result = sonic_cli(*[a.format(tmp=tmp_path) for a in args], cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(culprit, lines[0]), result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no fleet, task or output was started


def test_resources_become_each_batch_systems_own_words(tmp_path):
    from sonic_hep.workflows.grid.executors.condor import CondorExecutor
    from sonic_hep.workflows.grid.executors.slurm import SlurmExecutor
    from sonic_hep.workflows.grid.fleet import FleetSpec, executor_options

    slurm_options = executor_options("slurm", {"partition": "gpu"}, cpus=4, mem="16G", time_limit="08:00:00", gpus=1)
    assert slurm_options == {"partition": "gpu", "cpus_per_task": 4, "mem": "16G", "time": "08:00:00",
                             "extra": ["--gres=gpu:1"]}
    fleet = Fleet.create(tmp_path / "s", FleetSpec([str(DEMO)], executor="slurm", executor_options=slurm_options), 2)
    script = SlurmExecutor(fleet.task, slurm_options).script([0, 1], 0, 2)
    for line in ("#SBATCH --gres=gpu:1", "#SBATCH --cpus-per-task=4", "#SBATCH --mem=16G", "#SBATCH --partition=gpu",
                 "#SBATCH --job-name=sonic-fleet-s", f"sonic_hep.workflows.grid.job {fleet.directory}"):
        assert line in script, line

    condor_options = executor_options("condor", {}, cpus=2, mem="8GB", gpus=1)
    assert condor_options == {"request_cpus": 2, "request_memory": "8GB", "extra": {"request_gpus": "1"}}
    fleet = Fleet.create(tmp_path / "c", FleetSpec([str(DEMO)], executor="condor", executor_options=condor_options), 1)
    description = CondorExecutor(fleet.task, condor_options).description(None)
    assert [description[k] for k in ("request_gpus", "request_cpus", "request_memory")] == ["1", "2", "8GB"]
    assert str(fleet.directory) in description["arguments"]
    assert executor_options("dask", {}, cpus=2, mem="4GiB", time_limit="01:00:00") == \
        {"cores": 2, "memory": "4GiB", "walltime": "01:00:00"}
    with pytest.raises(GridError, match="a fleet needs a filesystem"):
        Fleet.create(tmp_path / "t", FleetSpec([str(DEMO)], executor="condor", executor_options={"transfer": True}), 1)


# -- end to end ------------------------------------------------------------------------------------------
def paced_config(path: Path, events: int, pace_ms: float = 20.0, fleet_tls: dict | None = None) -> Path:
    """demo_inference with an external wait of ``pace_ms`` per event beside the tagger: each job lasts seconds,
    and sends one inference request per event the whole time."""
    config = {
        "process": "fleettest",
        "source": {"type": "empty", "events": events},
        "modules": {"toyJets": {"type": "ToyJets"}, "pace": {"type": "SleepExternal", "ms": pace_ms},
                    "tagger": {"type": "ToyTagger"},
                    "pacehist": {"type": "Histogram1D", "src": "pace:value", "name": "pace", "high": 1.0e6}},
        "path": ["toyJets", "pace", "tagger", "pacehist"],
        "output": {"file": "fleettest.root", "products": ["tagger:scores as ToyJet"]},
        "services": {"inference": {"mode": "direct", "repository": [str(DEMO)], "fallback": False,
                                   "timeout_s": 10.0}},
        # one event per call: a request per event the whole time, so the faults land among requests in flight
        "options": {"streams": 2, "threads": 1, "events_per_call": 1},
    }
    if fleet_tls:
        config["services"]["inference"]["fleet_tls"] = fleet_tls
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def fleet_args(directory: Path, executor: str, servers: int, *extra: str) -> list[str]:
    return ["fleet", "start", directory, "-r", DEMO, "-m", "demo_mlp", "--servers", str(servers), "--executor",
            executor, "--cpus-per-server", "1", "--host", "127.0.0.1", "--heartbeat-s", "1", "--ttl-s", "5", "--drain-s", "1",
            "--scale-interval-s", "1", "--wait", "--timeout", "150", *extra]


def server_pids(fleet_dir: Path) -> list[int]:
    """Every tritonserver a server job of the fleet started (from the jobs' logs)."""
    pids = []
    for log in fleet_dir.glob("jobs/*/job.log"):
        pids += [int(p) for p in re.findall(r"Triton server ready, pid (\d+)", log.read_text())]
    return pids


def assert_equal_to_direct(task: Task, config: Path, events: int, tmp_path: Path) -> None:
    merge(task, tmp_path / "merged.root")
    direct = single_run(config, [], tmp_path / "direct.root", ("pace.ms=0", "options.streams=4"))  # same events
    with uproot.open(tmp_path / "merged.root") as m, uproot.open(direct) as d:
        assert m["Events"].num_entries == d["Events"].num_entries == events
        assert ak.all(m["Events"]["nToyJet"].array() == d["Events"]["nToyJet"].array())
        for label in ("b", "c", "uds", "g"):
            np.testing.assert_allclose(ak.flatten(m["Events"][f"ToyJet_{label}"].array()),
                                       ak.flatten(d["Events"][f"ToyJet_{label}"].array()), rtol=1e-5, atol=1e-6)


def servers_used(task: Task) -> list[set[str]]:
    """The servers each client job sent requests to (from its timing report)."""
    return [set(json.loads(task.files(i).timing.read_text())["inference"]["models"]["demo_mlp"]["servers"])
            for i in task.indices]


def member_running(fleet: Fleet, index: int) -> bool:
    return any(m.index == index and m.state == "running" and m.entry is not None for m in fleet.members())


def stop_and_check_nothing_left(sonic_cli, fleet_dir: Path, env: dict | None = None) -> Fleet:
    result = sonic_cli("fleet", "stop", fleet_dir, "--timeout", "60", env=env, check=True)
    fleet = Fleet(fleet_dir)
    assert all(m.state in ("done", "failed") for m in fleet.members()), result.stdout
    assert list((fleet_dir / "servers").iterdir()) == []  # every entry removed (or expired and swept below)
    for pid in server_pids(fleet_dir):
        wait_for(lambda pid=pid: gone(pid), 30, f"tritonserver {pid} to exit")
    assert fleet.manager() is None
    wait_for(lambda: not processes_mentioning(str(fleet_dir)), 60, "server jobs, drivers and manager to exit")
    return fleet


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.triton
@pytest.mark.timeout(400)
def test_slurm_fleet_serves_four_jobs_through_a_cancelled_server_and_scales_up_and_down(tmp_path, slurm, sonic_cli,
                                                                                        monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    # the test node has 2 cores; 3 one-core servers and 4 one-core clients share them
    assert slurm.run("scontrol", "update", "PartitionName=test", "OverSubscribe=FORCE:4").returncode == 0
    fleet_dir, events = tmp_path / "fleet", 4 * 300
    config = paced_config(tmp_path / "paced.yaml", events, pace_ms=80.0)  # ~12 s per job: servers join meanwhile
    try:
        start = sonic_cli(*fleet_args(fleet_dir, "slurm", 2, "--min-servers", "2", "--max-servers", "3",
                                      "--scale-threshold-ms", "0", "--scale-window-s", "2", "--scale-idle-s", "2",
                                      "-E", "time=00:10:00"), env=slurm.env, check=True)
        assert len(start.stdout.splitlines()) == 2  # both servers registered: "0000: 127.0.0.1:P serving demo_mlp"
        fleet = Fleet(fleet_dir)
        script = next((fleet_dir / "logs").glob("slurm-submit-*.sh")).read_text()
        assert "#SBATCH --cpus-per-task=1" in script and "#SBATCH --time=00:10:00" in script
        assert "#SBATCH --job-name=sonic-fleet-fleet" in script  # squeue --name finds a fleet's server jobs
        cancelled = fleet.members()[0]

        sonic_cli("submit", config, "-d", tmp_path / "task", "--executor", "slurm", "--events-per-job", "300",
                  "--fleet", fleet_dir, env=slurm.env, check=True)
        task = Task(tmp_path / "task")
        assert f"fleet: {fleet_dir}" in (task.directory / "config.yaml").read_text()

        def clients_running() -> bool:
            return all(task.report(i) is not None and task.report(i).state == "running" for i in task.indices)

        wait_for(clients_running, 120, "the 4 client jobs to run")
        # under load (threshold 0 ms: any queueing) the autoscaler adds a third server
        wait_for(lambda: any(d["action"] == "up" for d in fleet.decisions()), 60, "the autoscaler to add a server")
        up = next(d for d in fleet.decisions() if d["action"] == "up")
        assert up["queue_ms"] > 0 and up["servers"] == 2 and up["added"] == [2]
        cancelled_at = time.time()
        assert slurm.run("scancel", cancelled.batch_id).returncode == 0  # mid-run
        joined = wait_for(lambda: member_running(fleet, 2) and fleet.members()[2].entry.address, 90,
                          "the added server to register")
        joined_at = time.time()
        statuses = wait(task, interval=0.5, timeout=240)
        assert [s.state for s in statuses] == ["done"] * 4, [s.reason for s in statuses]
        assert_equal_to_direct(task, config, events, tmp_path)
        used = servers_used(task)
        assert all(used), used
        outlived = [i for i in task.indices if task.report(i).ended > cancelled_at]
        assert outlived, "no client job was still running when the server job was cancelled"
        assert all(used[i] - {cancelled.entry.address} for i in outlived)  # they went on elsewhere
        late = [i for i in task.indices if task.report(i).ended > joined_at + 3]  # after a client refresh (2 s)
        assert late, "no client job was still running when the added server joined"
        assert any(joined in used[i] for i in late), (joined, used)  # clients took in the server that joined

        # idle now; at --min-servers 2 (server 0 was cancelled) it keeps both, with 1 it removes one
        sonic_cli("fleet", "scale", fleet_dir, "--min-servers", "1", check=True)
        wait_for(lambda: any(d["action"] == "down" for d in fleet.decisions()), 60, "the autoscaler to remove one")
        down = next(d for d in fleet.decisions() if d["action"] == "down")
        assert "answered no request" in down["reason"]
        wait_for(lambda: next(m for m in fleet.members() if m.name == down["server"]).state == "done", 60,
                 f"server job {down['server']} to leave")
        assert next(m for m in fleet.members() if m.index == cancelled.index).state == "failed"
    finally:
        fleet = stop_and_check_nothing_left(sonic_cli, fleet_dir, slurm.env)
        slurm.run("scontrol", "update", "PartitionName=test", "OverSubscribe=NO")
    queued = slurm.run("squeue", "--noheader", "--name=sonic-fleet-fleet", "--format=%i %T")
    assert queued.stdout.strip() == "", queued.stdout  # no server job left in Slurm
    assert all(d["servers"] + d["starting"] < 3 for d in fleet.decisions() if d["action"] == "up")  # never above max


@pytest.mark.slow
@pytest.mark.triton
@pytest.mark.timeout(300)
@pytest.mark.parametrize("executor", ["local", "dask"])
def test_fleet_on_local_and_dask_serves_jobs_through_a_cancelled_server(tmp_path, sonic_cli, executor, request):
    """local, with mutual TLS: the manager replaces the cancelled server, a client without a certificate is
    refused; dask: the fleet stops by itself when its task ends."""
    fleet_dir, events = tmp_path / "fleet", 2 * 300
    tls = executor == "local"
    certs = request.getfixturevalue("pki") if tls else {}
    credentials = {"private_key": certs["client_key"], "certificate_chain": certs["client_cert"]} if tls else None
    config = paced_config(tmp_path / "paced.yaml", events, fleet_tls=credentials)
    extra = ["--tls-cert", certs["server_cert"], "--tls-key", certs["server_key"], "--tls-root-cert", certs["ca"],
             "--tls-ca", certs["ca"], "--tls-client-cert", certs["client_cert"], "--tls-client-key",
             certs["client_key"]] if tls else ["--stop-with-tasks"]
    try:
        sonic_cli(*fleet_args(fleet_dir, executor, 2, *extra), check=True)
        fleet = Fleet(fleet_dir)
        cancelled = fleet.members()[0]
        if tls:  # what clients trust comes with the entry
            assert cancelled.entry.ssl and cancelled.entry.root_certificates == certs["ca"]
        shown = json.loads(sonic_cli("fleet", "status", fleet_dir, "--json", check=True).stdout)
        assert [(m["state"], m["registered"], m["models"]) for m in shown["members"]] == \
            [("running", True, ["demo_mlp"])] * 2 and shown["manager"] is not None
        sonic_cli("submit", config, "-d", tmp_path / "task", "--executor", executor, "--events-per-job", "300",
                  "--max-running", "2", "--fleet", fleet_dir, check=True)
        task = Task(tmp_path / "task")
        wait_for(lambda: all(task.report(i) is not None and task.report(i).state == "running" for i in task.indices),
                 120, "the client jobs to run")
        cancelled_at = time.time()
        fleet.cancel(cancelled)  # SIGTERM to the server job, as a batch system's cancel
        statuses = wait(task, interval=0.5, timeout=200)
        drivers_gone(task.directory)
        assert [s.state for s in statuses] == ["done"] * 2, [s.reason for s in statuses]
        assert_equal_to_direct(task, config, events, tmp_path)
        assert [m.state for m in fleet.members()][0] == "failed" and "SIGTERM" in fleet.members()[0].reason
        assert any(task.report(i).ended > cancelled_at for i in task.indices)
        if executor == "dask":  # every task submitted with --fleet ended: the manager stops the fleet
            wait_for(lambda: fleet.stopping and fleet.manager() is None and
                     all(m.state in ("done", "failed") for m in fleet.members()), 90, "the fleet to stop itself")
        else:  # the manager replaced the cancelled server (min 2): a third job registered
            wait_for(lambda: len(fleet.members()) == 3 and member_running(fleet, 2), 90, "a replacement server")
            assert [d["action"] for d in fleet.decisions()] == ["up"] and "< min 2" in fleet.decisions()[0]["reason"]
            refused = sonic_cli("run", "demo_inference", "-n", "5", "-o", tmp_path / "refused.root", "--fleet",
                                fleet_dir, "-p", "services.inference.fallback=false",
                                "-p", "services.inference.fleet_wait_s=0")  # no client certificate
            assert refused.returncode == 1 and "no server can run model 'demo_mlp'" in refused.stderr, refused.stderr
    finally:
        stop_and_check_nothing_left(sonic_cli, fleet_dir)
    drivers_gone(fleet_dir)


@pytest.mark.triton
@pytest.mark.timeout(180)
def test_a_server_job_rides_out_an_unwritable_fleet_directory_and_leaves_cleanly_when_it_lasts(tmp_path):
    """``servers/`` replaced by a file makes the directory refuse entries whoever runs the test (root ignores
    permissions and a container may refuse ``chattr``): the server keeps serving, is advertised again when the
    directory comes back, and leaves cleanly (entry, drain, server stopped, ``failed`` with why) after 3 TTLs."""
    import subprocess
    import sys

    from sonic_hep.framework.inference.sonic.connection import ServerConnection
    from sonic_hep.framework.inference.serving.fleet_directory import live_entries
    from sonic_hep.workflows.grid.fleet import FleetSpec

    fleet = Fleet.create(tmp_path / "fleet", FleetSpec([str(DEMO)], models=["demo_mlp"], host="127.0.0.1",
                                                       heartbeat_s=0.5, ttl_s=4.0, drain_s=0.5), 1)
    servers, away, log = fleet.directory / "servers", fleet.directory / "servers.away", fleet.task.files(0).log

    def unwritable() -> None:
        servers.rename(away)
        servers.write_text("not a folder")

    job = subprocess.Popen([sys.executable, "-m", "sonic_hep.workflows.grid.job", str(fleet.directory), "0"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # run by hand: no submission
    try:
        entry = wait_for(lambda: live_entries(fleet.directory), 90, "the server to register")[0]
        pid = server_pids(fleet.directory)[0]
        unwritable()
        warned = f"cannot write its entry in {fleet.directory}: "
        wait_for(lambda: warned in log.read_text() and "keeps serving" in log.read_text(), 30, "the warning")
        connection = ServerConnection(entry.spec())
        try:
            assert connection.probe() == {"demo_mlp": "1"}  # still serving those who know it
        finally:
            connection.close(grace_s=0.0)
        assert job.poll() is None and json.loads(fleet.task.files(0).report.read_text())["state"] == "running"

        last = json.loads((away / "0000.json").read_text())["heartbeat"]  # the last write that got through
        servers.unlink()
        away.rename(servers)
        wait_for(lambda: any(e.heartbeat > last for e in live_entries(fleet.directory)), 30, "a new heartbeat")
        assert "the server is advertised again" in log.read_text() and not gone(pid)

        unwritable()  # now for longer than the grace: it leaves
        code = job.wait(120)
    finally:
        if job.poll() is None:
            job.kill()
    report = json.loads(fleet.task.files(0).report.read_text())
    assert code == 1 and report["state"] == "failed", (code, report)
    assert report["reason"].startswith(f"cannot write its entry in {fleet.directory} for "), report["reason"]
    assert "(limit 12 s)" in report["reason"] and "draining" in log.read_text()
    wait_for(lambda: gone(pid), 30, "its Triton server to stop")  # stopped, not left running
