"""Chaos: six concurrent ``sonic run`` jobs share two managed Triton servers while a fault schedule kills
one, stops the other (SIGSTOP) until every job has fallen back to its own local server, continues it and
restarts the first. Every job must finish with output equal to a clean direct run, and leave nothing:
no server process, no shared memory region, no temporary output.

Real processes throughout (the CLI in subprocesses, ``tritonserver`` from the wheel); each wait is
bounded, nothing asserts a duration.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.workflows.bench.reliability import answered, has_server_child
from sonic_hep.workflows.compare import compare_files
from tests.polling import processes_mentioning, wait_for

pytestmark = [pytest.mark.triton, pytest.mark.slow, pytest.mark.timeout(300)]

JOBS = 6
EVENTS = 3000  # ~30 s of work per job here: long enough for the whole fault schedule to land mid-run
TIMEOUT_S = 2.0
# one event per call: a steady stream of requests, so each fault lands with requests in flight
SETTINGS = [f"source.events={EVENTS}", "options.progress=false", "options.events_per_call=1",
            f"services.inference.timeout_s={TIMEOUT_S}",
            "services.inference.breaker_backoff_s=0.5", "services.inference.breaker_max_backoff_s=2"]


def sonic_run(*args: str) -> list[str]:
    return [sys.executable, "-m", "sonic_hep.workflows.cli", "run", "demo_inference", "--no-progress", "-q", *args]


def shm_of(pids: list[int]) -> list[str]:
    """/dev/shm regions named after one of ``pids`` (client regions ``sonic_<pid>-<start>_``, server stubs
    ``sonic_triton_<pid>-<start>_``)."""
    pattern = re.compile(r"sonic_(?:triton_)?(\d+)-\d+_")
    return [p.name for p in Path("/dev/shm").iterdir()
            if (m := pattern.match(p.name)) and int(m.group(1)) in pids]


def took_out(log: Path, addresses: tuple[str, ...]) -> bool:
    """Whether the job's log says each of ``addresses`` left its rotation."""
    text = log.read_text()
    return all(f"Triton server {address} out of rotation" in text for address in addresses)


def test_six_jobs_survive_a_killed_and_a_stopped_server(tmp_path):
    outputs, timings, logs = tmp_path / "outputs", tmp_path / "timings", tmp_path / "logs"
    for folder in (outputs, timings, logs):
        folder.mkdir()
    direct = tmp_path / "direct.root"
    subprocess.run(sonic_run("-o", str(direct), *[f"-p={s}" for s in SETTINGS]), check=True, timeout=120,
                   capture_output=True)

    first = TritonServer([DEMO_REPOSITORY], models=["demo_mlp"], workdir=tmp_path / "first").start()
    second = TritonServer([DEMO_REPOSITORY], models=["demo_mlp"], workdir=tmp_path / "second").start()
    restarted: TritonServer | None = None
    jobs: list[subprocess.Popen] = []
    stopped = False
    try:
        for i in range(JOBS):
            fallback = f"services.inference.fallback_server={{workdir: '{tmp_path / f'fallback-{i}'}', models: [demo_mlp]}}"
            args = ["-o", str(outputs / f"job-{i}.root"), "--timing-json", str(timings / f"job-{i}.json"),
                    "--inference", "sonic", "--server", first.grpc_url, "--server", second.grpc_url,
                    *[f"-p={s}" for s in SETTINGS], f"-p={fallback}",
                    "-p=services.inference.fallback=always"]  # servers are named: the fallback must be asked for
            with open(logs / f"job-{i}.log", "w") as log:  # a file, so the test can read it while the job runs
                jobs.append(subprocess.Popen(sonic_run(*args), stdout=subprocess.DEVNULL, stderr=log, text=True))

        # the fault schedule, each step once every job is where the step should hurt
        wait_for(lambda: answered(first) >= 300 and answered(second) >= 300, 90, "both servers in use")
        first.kill()
        os.kill(second.pid, signal.SIGSTOP)
        stopped = True
        running = [job for job in jobs if job.poll() is None]
        assert len(running) == JOBS, "a job ended before the faults: raise EVENTS"
        wait_for(lambda: all(job.poll() is not None or has_server_child(job.pid) for job in jobs), 90,
                 "every job to start its fallback server")
        # A job can fall back before it takes both servers out (one request that failed on each is enough);
        # its statistics refresh then finds the dead and the silent one. Recovery before that would let a
        # server come back unnoticed, so the schedule waits for each job to say it took both out.
        wait_for(lambda: all(took_out(logs / f"job-{i}.log", (first.grpc_url, second.grpc_url)) or job.poll() is not None
                             for i, job in enumerate(jobs)), 90, "every job to take both servers out of rotation")
        os.kill(second.pid, signal.SIGCONT)
        stopped = False
        restarted = TritonServer([DEMO_REPOSITORY], models=["demo_mlp"], workdir=tmp_path / "restarted",
                                 grpc_port=first.ports["grpc"], http_port=first.ports["http"],
                                 metrics_port=first.ports["metrics"]).start()

        for i, job in enumerate(jobs):
            job.wait(timeout=180)
            assert job.returncode == 0, f"job {i} exited {job.returncode}:\n{(logs / f'job-{i}.log').read_text()[-3000:]}"
        for i in range(JOBS):
            comparison = compare_files(str(direct), str(outputs / f"job-{i}.root"))
            assert comparison.equal, f"job {i}: {comparison.summary()}"
            report = json.loads((timings / f"job-{i}.json").read_text())["inference"]
            assert report["fallback"] is not None, f"job {i} never needed its fallback: the faults came too late"
            assert {first.grpc_url, second.grpc_url} <= set(report["out_of_rotation"]), (i, report["out_of_rotation"])
            assert report["models"]["demo_mlp"]["failures"] == 0

        # nothing left behind by the jobs: no server (fallbacks ran in tmp_path/fallback-*), no memory, no temporaries
        job_pids = [job.pid for job in jobs]
        for i in range(JOBS):
            assert not processes_mentioning(str(tmp_path / f"fallback-{i}")), f"job {i}'s fallback server outlived it"
        assert not shm_of(job_pids), f"shared memory left by the jobs: {shm_of(job_pids)}"
        assert sorted(p.name for p in outputs.iterdir()) == [f"job-{i}.root" for i in range(JOBS)]
        assert sorted(p.name for p in timings.iterdir()) == [f"job-{i}.json" for i in range(JOBS)]
    finally:
        if stopped:
            os.kill(second.pid, signal.SIGCONT)
        for job in jobs:
            if job.poll() is None:
                job.kill()
                job.wait()
        for server in (restarted, second, first):
            if server is not None:
                server.stop()
    # and the servers this test managed are gone with their memory
    assert not processes_mentioning(str(tmp_path)), processes_mentioning(str(tmp_path))
    prefixes = [server.shm_prefix for server in (first, second, restarted) if server is not None]
    assert not [p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(tuple(prefixes))]
