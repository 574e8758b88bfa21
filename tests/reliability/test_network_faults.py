"""Faults on a real link between a job and its server: the network lab's two namespaces and veth pair
(``workflows/netlab``), a ``sonic run`` job on one side and ``sonic server start`` on the other.

* a **silent partition** mid-run: the kernel drops every packet both ways (nothing is refused or closed) for
  up to 20 s. The job's keepalive finds the connection silent, its breaker takes the server out and the
  requests go to the job's own fallback server; no request waits for ``timeout_s``, so the partition costs
  the job far less than the bound ``breaker_threshold × timeout_s`` (asserted as that property, never as a
  duration), and no event is lost: the output equals a clean run's;
* a **lossy, jittery link** (1 % of packets dropped each way, each chunk's delay moved by up to ± 100 ms): every
  request is answered over it, none fails, the output equals a clean run's.

How the stall of a link *in the middle of a message* fails over is in ``test_partition.py`` (a relay that cuts
a request mid-way). Needs root (CI runs as root); elsewhere the lab's one-line refusal skips these tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.workflows.compare import compare_files
from tests.polling import wait_for

pytestmark = [pytest.mark.triton, pytest.mark.slow, pytest.mark.timeout(300)]

PARTITION_S = 20.0
#: one event per call: a steady stream of requests, so the partition lands with requests in flight
COMMON = ["options.progress=false", "options.events_per_call=1"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The lab with one ``demo_mlp`` server on its server side, unshaped to begin with."""
    from sonic_hep.workflows.netlab import LabRefused, NetworkLab

    try:
        lab = NetworkLab().open()
    except LabRefused as refused:
        pytest.skip(str(refused))
    try:
        lab.start_server("--repository", str(DEMO_REPOSITORY), "--model", "demo_mlp")
        yield lab
    finally:
        lab.close()


def sonic_run(output: Path, events: int, *settings: str, timing: Path | None = None,
              server: str | None = None) -> list[str]:
    """``sonic run demo_inference``: direct, or SONIC on ``server``."""
    args = ["run", "demo_inference", "--no-progress", "-q", "-o", str(output),
            *([f"--timing-json={timing}"] if timing else []),
            *(["--inference", "sonic", "--server", server] if server else []),
            *[f"-p={s}" for s in [f"source.events={events}", *COMMON, *settings]]]
    return [sys.executable, "-m", "sonic_hep.workflows.cli", *args]


def direct_run(output: Path, events: int) -> None:
    """The clean run every faulty one is compared with (direct = SONIC, bit for bit: docs/inference.md)."""
    subprocess.run(sonic_run(output, events), check=True, timeout=180, capture_output=True)


def sent_bytes(lab) -> int:
    """Bytes the jobs' side has sent over the link so far (the kernel's count of its veth end)."""
    done = lab.run(["cat", "/sys/class/net/lab0/statistics/tx_bytes"], timeout=30)
    return int(done.stdout)


def dropped(lab) -> int:
    """Packets the link has dropped on purpose so far, both ways (each end's loss queue holds none)."""
    total = 0
    for side in ("jobs", "server"):
        shown = lab.run(["tc", "-s", "qdisc", "show", "dev", "lab0"], side=side, timeout=30).stdout
        block = shown.split("qdisc pfifo 2:", 1)[1] if "qdisc pfifo 2:" in shown else ""
        total += int(block.split("dropped", 1)[1].split(",")[0]) if "dropped" in block else 0
    return total


def inference_report(timing: Path) -> dict:
    return json.loads(timing.read_text())["inference"]


def test_a_silent_partition_mid_run_moves_the_work_to_the_fallback_and_loses_no_event(lab, tmp_path):
    from sonic_hep.workflows.netlab import Link

    events = 4000
    direct_run(tmp_path / "direct.root", events)
    lab.shape(Link())
    server = lab.grpc_addresses[-1]
    output, timing, log = tmp_path / "sonic.root", tmp_path / "timing.json", tmp_path / "job.log"
    # fallback "always": a job that names its servers starts no fallback by default
    settings = ["services.inference.timeout_s=20", "services.inference.keepalive_s=1",
                "services.inference.keepalive_timeout_s=2", "services.inference.fallback=always",
                f"services.inference.fallback_server={{workdir: '{tmp_path / 'fallback'}', models: [demo_mlp]}}"]
    command = sonic_run(output, events, *settings, timing=timing, server=server)
    start = sent_bytes(lab)
    with open(log, "w") as stderr:
        job = lab.popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_for(lambda: sent_bytes(lab) - start > 200_000 or job.poll() is not None, 120, "requests on the link")
        assert job.poll() is None, "the job ended before the partition: raise its events"
        lab.partition()
        partitioned = time.monotonic()
        try:  # the partition lasts PARTITION_S, or until the job is done
            wait_for(lambda: job.poll() is not None or time.monotonic() - partitioned > PARTITION_S,
                     PARTITION_S + 60, "the partition's end")
        finally:
            lab.shape(Link())  # healed
        job.wait(180)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0, log.read_text()[-3000:]
    comparison = compare_files(str(tmp_path / "direct.root"), str(output))
    assert comparison.equal and comparison.entries == (events, events), comparison.summary()
    report = inference_report(timing)
    counts = report["models"]["demo_mlp"]
    assert server in report["out_of_rotation"], report["out_of_rotation"]  # the breaker opened on it ...
    assert report["fallback"] is not None  # ... and the job started its own server
    assert counts["answers"].get(server, 0) > 0 and sum(counts["answers"].values()) > counts["answers"][server], \
        counts["answers"]  # the server answered some before the partition, the fallback the rest
    assert counts["failures"] == 0 and counts["failovers"] >= 1, counts
    # the bound: no request waited for its deadline, so the partition cost no timeout_s at all
    assert not report["deadlines"], report["deadlines"]


def test_one_percent_loss_and_a_hundred_ms_of_jitter_lose_no_event(lab, tmp_path):
    from sonic_hep.workflows.netlab import Link

    events = 200
    direct_run(tmp_path / "direct.root", events)
    lab.shape(Link.parse("rtt=20ms,jitter=100ms,loss=1%"))
    server = lab.grpc_addresses[-1]  # through the relay that delays and jitters
    try:
        output, timing = tmp_path / "sonic.root", tmp_path / "timing.json"
        before = dropped(lab)
        done = lab.run(sonic_run(output, events, "services.inference.fallback=false", timing=timing,
                                 server=server), timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]
        assert dropped(lab) > before  # the link did lose some of the hundreds of packets the job sent and got
    finally:
        lab.shape(Link())
    comparison = compare_files(str(tmp_path / "direct.root"), str(output))
    assert comparison.equal and comparison.entries == (events, events), comparison.summary()
    counts = inference_report(timing)["models"]["demo_mlp"]
    assert counts["failures"] == 0 and counts["answers"] == {server: counts["requests"]}, counts
