"""Chaos on a grid task: job processes SIGKILLed at seeded random moments, on the real local executor
and on a real Slurm; the failed jobs are resubmitted until done, and the merged output equals one single run
over the whole input, array by array. Then an output swapped with another job's of equal length, and one
whose basket bytes were corrupted after ``done``, are refused by ``sonic merge`` with one line naming the job
and what differs.

Rerun with another seed: ``SONIC_CHAOS_SEED=7 pytest tests/reliability/test_grid_chaos.py``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
import uproot
import yaml

from sonic_hep.workflows.grid.errors import IncompleteTask
from sonic_hep.workflows.grid.merge import merge
from sonic_hep.workflows.grid.status import collect, wait
from sonic_hep.workflows.grid.submit import SubmitRequest, resubmit, submit
from sonic_hep.workflows.grid.task import Task
from tests.grid.conftest import drivers_gone, single_run
from tests.grid.samples import assert_same_events, write_nano

SEED = int(os.environ.get("SONIC_CHAOS_SEED", "11"))
EVENTS_PER_JOB = 40
ROUNDS = 4  # submission + resubmissions with kills; a last round runs without


def slow_config(path: Path, ms: float = 25.0) -> Path:
    """A selection without an event filter (each job writes as many entries as it reads, so two outputs
    can be swapped without changing their lengths), slowed by external work that sleeps (no CPU)."""
    config = {"process": "gridchaos", "source": {"chunk_size": 10},
              "modules": {"ht": {"type": "CollectionSum", "min_pt": 30.0},
                          "good": {"type": "SelectObjects", "min_pt": 25.0},
                          "slow": {"type": "SleepExternal", "ms": ms},
                          "slowhist": {"type": "Histogram1D", "src": "slow:value", "name": "index", "high": 1e4}},
              "output": {"products": ["ht:*", "good:objects as GoodJet", "MET_pt"]},
              # one event per call: each event's sleep in turn, so a job lasts seconds and the kills land in it
              "options": {"events_per_call": 1}}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class Killer(threading.Thread):
    """Watches the task's jobs; each attempt it sees running is, with probability ``p``, SIGKILLed after a
    random delay (seeded), wherever it is then: starting, reading, processing, writing or validating."""

    def __init__(self, task: Task, rng: random.Random, p: float = 0.5, max_delay: float = 1.5):
        super().__init__(daemon=True, name="chaos-killer")
        self.task, self.rng, self.p, self.max_delay = task, rng, p, max_delay
        self.stop = threading.Event()
        self.seen: set[tuple[int, int]] = set()
        self.kills: list[tuple[int, int, float]] = []  # (job, attempt, delay in s)

    def run(self) -> None:
        doomed: dict[tuple[int, int], tuple[float, int, float]] = {}
        while not self.stop.is_set():
            for index in self.task.indices:
                try:
                    report = json.loads(self.task.files(index).report.read_text())
                except (FileNotFoundError, json.JSONDecodeError):
                    continue
                key = (index, report["attempt"])
                if report["state"] == "running" and key not in self.seen:
                    self.seen.add(key)
                    if self.rng.random() < self.p:
                        delay = self.rng.uniform(0.0, self.max_delay)
                        doomed[key] = (time.monotonic() + delay, report["pid"], delay)
            for key, (when, pid, delay) in list(doomed.items()):
                if time.monotonic() >= when:
                    del doomed[key]
                    if _is_job_process(pid, self.task.directory):
                        os.kill(pid, signal.SIGKILL)
                        self.kills.append((*key, round(delay, 2)))
            time.sleep(0.02)


def _is_job_process(pid: int, directory: Path) -> bool:
    """Only a live job wrapper of this task is signalled (never a reused pid)."""
    try:
        process = psutil.Process(pid)
        return "sonic_hep.workflows.grid.job" in process.cmdline() and str(directory) in " ".join(process.cmdline()) \
            and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def job_processes(directory: Path) -> list[int]:
    out = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "sonic_hep.workflows.grid.job" in cmdline and str(directory) in cmdline:
            out.append(process.info["pid"])
    return out


def entries(task: Task, index: int) -> str:
    """How the refusal names a job's entry range: ``entries 120-159 of a.root, b.root``."""
    spec, _ = task.spec(index)
    last = spec.first_entry + spec.max_events - 1
    return f"entries {spec.first_entry}-{last} of {', '.join(Path(p).name for p in spec.inputs)}"


@pytest.fixture
def executor(request, tmp_path_factory, monkeypatch):
    """The executor's name, with a real Slurm started for ``slurm``."""
    if request.param == "slurm":
        slurm = request.getfixturevalue("slurm")
        monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    return request.param


@pytest.mark.timeout(240)
@pytest.mark.parametrize("executor", ["local", pytest.param("slurm", marks=pytest.mark.slurm)], indirect=True)
def test_killed_jobs_resubmitted_merge_to_the_single_run_and_tampered_outputs_are_refused(tmp_path, executor,
                                                                                           sonic_cli):
    rng = random.Random(f"{SEED}-{executor}")
    inputs = [write_nano(tmp_path / "a.root", 130, seed=21, first_event=1),
              write_nano(tmp_path / "b.root", 110, seed=22, first_event=1001)]
    config = slow_config(tmp_path / "chaos.yaml")
    task = submit(SubmitRequest(config=str(config), output_dir=str(tmp_path / "task"), inputs=[str(p) for p in inputs],
                                events_per_job=EVENTS_PER_JOB, executor=executor, max_running=2, max_retries=10)).task
    assert task.njobs == 6
    kills: list[tuple[int, int, float]] = []
    for round_ in range(ROUNDS + 1):
        killer = Killer(task, rng) if round_ < ROUNDS else None
        if killer:
            killer.start()
        try:
            statuses = wait(task, interval=0.3, timeout=150)
        finally:
            if killer:
                killer.stop.set()
                killer.join(5)
                kills += killer.kills
        failed = [s for s in statuses if s.state == "failed"]
        for s in failed:  # every failure is one of ours, reported as a kill
            assert "SIGKILL" in s.reason or "ended without reporting" in s.reason, (SEED, s.index, s.reason)
        if not failed:
            break
        assert resubmit(task).submitted == [s.index for s in failed]
    print(f"seed {SEED}, {executor}: killed (job, attempt, after s) {kills}")
    assert kills, f"seed {SEED}: no job was killed; the test proved nothing"
    assert [s.state for s in statuses] == ["done"] * task.njobs, (SEED, kills, [s.reason for s in statuses])
    assert max(s.attempt for s in statuses) > 1
    if executor == "local":
        drivers_gone(task.directory)
    assert job_processes(task.directory) == []  # no job left behind
    assert not list(task.directory.glob("jobs/*/output.root.*"))  # no partial or rejected output left

    merged = tmp_path / "merged.root"
    assert merge(task, merged) == 240
    assert_same_events(merged, single_run(config, inputs, tmp_path / "single.root"))

    pristine = {i: task.files(i).output.read_bytes() for i in task.indices}
    a, b = rng.sample(range(task.njobs - 1), 2)  # two of the full 40-entry jobs
    shutil.copy(task.files(a).output, task.files(b).output)  # events of job a twice, job b's missing
    result = sonic_cli("merge", task.directory, "-o", tmp_path / "swapped.root")
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert f"job {b}: failed (output changed since done: it holds {entries(task, a)}, but job {b} was asked for " \
        f"{entries(task, b)}" in result.stderr, result.stderr
    assert not (tmp_path / "swapped.root").exists()
    task.files(b).output.write_bytes(pristine[b])

    victim = rng.randrange(task.njobs)
    path = task.files(victim).output
    record = json.loads(task.files(victim).report.read_text())
    with uproot.open(path) as handle:
        seek = int(handle["Events"]["GoodJet_pt"].member("fBasketSeek")[0])
    data = bytearray(pristine[victim])
    for k in range(seek + 100, seek + 104):  # inside the first basket of a jagged branch
        data[k] ^= 0x5A
    path.write_bytes(bytes(data))
    os.utime(path, ns=(record["output_mtime_ns"], record["output_mtime_ns"]))  # same size and time
    with pytest.raises(IncompleteTask) as refused:
        merge(task, tmp_path / "corrupt.root")
    message = str(refused.value)
    assert f"job {victim}: output.root changed after the job was marked done: sha256" in message, message
    assert "\n" not in message and not (tmp_path / "corrupt.root").exists()

    path.write_bytes(pristine[victim])  # the true bytes again: accepted again
    os.utime(path, ns=(record["output_mtime_ns"], record["output_mtime_ns"]))
    assert [s.state for s in collect(task, verify=True)[0]] == ["done"] * task.njobs
    assert merge(task, tmp_path / "again.root") == 240
