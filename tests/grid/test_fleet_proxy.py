"""A fleet behind its gRPC proxy, end to end: ``sonic fleet start --proxy haproxy`` with tokens required, a job
given only the proxy's address and a token file, one server killed (SIGKILL) while the job runs, the proxy
following the fleet directory (the dead server out, its replacement in), and nothing left after ``fleet stop``.

Everything is real: HAProxy, ``tritonserver`` processes, ``sonic`` commands in subprocesses, RS256 tokens made by
the test (``tests/tokens.py``). Skipped where HAProxy 2.5+ is not installed (``apt-get install haproxy``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import uproot

from sonic_hep.framework.inference.serving import ProxyUnavailable, read_entries
from sonic_hep.framework.inference.serving.grpc_proxy import haproxy_program
from sonic_hep.workflows.grid.fleet_proxy import record
from tests.grid.conftest import single_run
from tests.grid.test_fleet import DEMO, fleet_args, paced_config, stop_and_check_nothing_left
from tests.polling import gone, wait_for
from tests.tokens import AUDIENCE, ISSUER, Issuer


@pytest.fixture
def haproxy():
    try:
        return haproxy_program(tokens=True)
    except ProxyUnavailable as err:
        pytest.skip(str(err))


@pytest.mark.parametrize("args, culprit", [
    (["--token-key", "{key}"], "--token-key needs a proxy: add --proxy haproxy"),
    (["--proxy", "haproxy", "--token-key", "{key}"], "a token issuer is needed with a token key"),
    (["--proxy", "haproxy", "--proxy-host", "0.0.0.0", "--token-key", "{key}", "--token-issuer", ISSUER,
      "--token-audience", AUDIENCE], "bearer tokens would reach the proxy on 0.0.0.0 in clear text"),
])
def test_bad_proxy_flags_are_one_line_and_start_nothing(tmp_path, sonic_cli, haproxy, args, culprit):
    key = Issuer.make(tmp_path, "site").public
    result = sonic_cli("fleet", "start", tmp_path / "fleet", "-r", DEMO,
                       *[a.format(key=key) for a in args])
    assert result.returncode != 0 and culprit in result.stderr, result.stderr
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1, result.stderr
    assert not (tmp_path / "fleet").exists()


def served(address: str) -> int:
    """Requests of demo_mlp a server has answered (its own statistics, asked directly)."""
    with grpcclient.InferenceServerClient(address) as client:
        stats = client.get_inference_statistics("demo_mlp").model_stats
    return sum(s.inference_stats.success.count for s in stats)


def triton_pid(fleet_dir: Path, name: str) -> int:
    import re

    log = (fleet_dir / "jobs" / name / "job.log").read_text()
    return int(re.findall(r"Triton server ready, pid (\d+)", log)[-1])


@pytest.mark.slow
@pytest.mark.triton
@pytest.mark.timeout(400)
def test_a_fleet_behind_its_proxy_serves_a_job_with_a_token_through_a_killed_server(tmp_path, sonic_cli, haproxy):
    issuer = Issuer.make(tmp_path, "site")
    token = issuer.token()
    token_file = tmp_path / "bt_job"
    token_file.write_text(token)
    fleet_dir, events = tmp_path / "fleet", 400
    config = paced_config(tmp_path / "paced.yaml", events, pace_ms=20.0)  # ~4 s: a server dies meanwhile
    haproxy_pid = None
    try:
        start = sonic_cli(*fleet_args(fleet_dir, "local", 2, "--proxy", "haproxy", "--token-key", issuer.public,
                                      "--token-issuer", ISSUER, "--token-audience", AUDIENCE), check=True)
        found = record(fleet_dir)
        haproxy_pid, address = found["haproxy_pid"], found["address"]
        assert start.stdout.splitlines()[-1] == f"proxy: {address}, bearer tokens of {ISSUER} for {AUDIENCE}"
        entries = {e.name: e.address for e in read_entries(fleet_dir)}
        wait_for(lambda: record(fleet_dir)["servers"] == entries, 30, "the proxy to hold both servers")
        status = sonic_cli("fleet", "status", fleet_dir, check=True).stdout
        assert f"proxy {address}, bearer tokens of {ISSUER} for {AUDIENCE}: 2 server(s) in rotation" in status

        env = {**os.environ, "BEARER_TOKEN_FILE": str(token_file)}
        env.pop("BEARER_TOKEN", None)
        job_log = tmp_path / "job.log"
        with open(job_log, "w") as out:
            job = subprocess.Popen([sys.executable, "-m", "sonic_hep.workflows.cli", "-v", "run", str(config), "-o",
                                    str(tmp_path / "through-proxy.root"), "--inference", "sonic", "--server", address,
                                    "-p", "services.inference.fallback=false", "--timing-json",
                                    str(tmp_path / "timing.json"), "--no-progress"],
                                   stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
        try:  # both servers answer the job's calls, then one dies mid-run
            wait_for(lambda: all(served(a) >= 20 for a in entries.values()), 120, "both servers to serve the job")
            killed_at = time.time()
            os.kill(triton_pid(fleet_dir, "0000"), signal.SIGKILL)
            assert job.wait(timeout=240) == 0, job_log.read_text()[-3000:]
        finally:
            if job.poll() is None:
                job.kill()
        assert (tmp_path / "timing.json").stat().st_mtime > killed_at  # the job was still running when it died
        direct = single_run(config, [], tmp_path / "direct.root", ("pace.ms=0", "options.streams=4"))
        with uproot.open(tmp_path / "through-proxy.root") as p, uproot.open(direct) as d:
            assert p["Events"].num_entries == d["Events"].num_entries == events  # no event lost
            for label in ("b", "c", "uds", "g"):
                np.testing.assert_allclose(ak.flatten(p["Events"][f"ToyJet_{label}"].array()),
                                           ak.flatten(d["Events"][f"ToyJet_{label}"].array()), rtol=1e-5, atol=1e-6)

        # the proxy follows the fleet: the dead server leaves it, the manager's replacement (min 2) joins it
        def replaced() -> bool:
            servers = record(fleet_dir)["servers"]
            return len(servers) == 2 and "0000" not in servers and "0002" in servers

        wait_for(replaced, 120, "the proxy to drop the killed server and take in its replacement")
        keeper_log = next((fleet_dir / "logs").glob("proxy-*.log")).read_text()
        assert "0000 left" in keeper_log and "0002 joined" in keeper_log

        # nothing wrote or logged the token: the job's debug log, its outputs, the fleet's files and logs
        for path in [p for p in tmp_path.rglob("*") if p.is_file() and p != token_file and p.suffix != ".sock"]:
            data = path.read_bytes()
            assert token.encode() not in data and token.split(".")[2].encode() not in data, path
    finally:
        stop_and_check_nothing_left(sonic_cli, fleet_dir)
    assert haproxy_pid is not None and gone(haproxy_pid) and record(fleet_dir) is None
