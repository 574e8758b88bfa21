"""Behind a proxy (nginx in front of two servers) a statistics call reaches whichever server the proxy picks:
the job's report marks those numbers as not one server's totals instead of presenting them as the server's."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys

import pytest

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.framework.inference.sonic.server_statistics import not_one_server
from tests.polling import wait_for

SONIC = [sys.executable, "-m", "sonic_hep.workflows.cli"]

NGINX = """daemon off;
pid {folder}/nginx.pid;
error_log {folder}/error.log;
events {{}}
http {{
  access_log off;
  client_body_temp_path {folder}/tmp;
  proxy_temp_path {folder}/tmp;
  fastcgi_temp_path {folder}/tmp;
  uwsgi_temp_path {folder}/tmp;
  scgi_temp_path {folder}/tmp;
  upstream triton {{ server 127.0.0.1:{first}; server 127.0.0.1:{second}; }}
  server {{ listen 127.0.0.1:{port} http2; location / {{ grpc_pass grpc://triton; }} }}
}}
"""


def test_counts_below_what_the_job_had_answered_are_not_one_servers():
    answered = {"demo_mlp": {"answers": {"proxy:8001": 12, "one:8001": 12, "fallback:1": 3}}}
    server_side = {"proxy:8001": {"demo_mlp": {"requests": 6}}, "one:8001": {"demo_mlp": {"requests": 40}},
                   "fallback:1 (fallback)": {"demo_mlp": {"requests": 3}}}
    assert not_one_server(server_side, answered) == {
        "proxy:8001": "it counted 6 requests of 'demo_mlp' where this job had 12 answered there"}
    # a counter that went down (seen by the server pool) says the same, whatever the counts
    assert not_one_server(server_side, answered, {"one:8001": "its request count went down"})["one:8001"] == \
        "its request count went down"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _listens(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.mark.triton
@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx not installed")
def test_a_job_behind_nginx_marks_the_statistics(tmp_path):
    with TritonServer([DEMO_REPOSITORY], models=["demo_mlp"], workdir=tmp_path / "first") as first, \
            TritonServer([DEMO_REPOSITORY], models=["demo_mlp"], workdir=tmp_path / "second") as second:
        port = _free_port()
        (tmp_path / "tmp").mkdir()
        (tmp_path / "nginx.conf").write_text(NGINX.format(folder=tmp_path, port=port, first=first.ports["grpc"],
                                                          second=second.ports["grpc"]))
        nginx = subprocess.Popen(["nginx", "-c", str(tmp_path / "nginx.conf"), "-p", str(tmp_path)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: _listens(port), 30, "nginx to listen")
            job = subprocess.run([*SONIC, "run", "demo_inference", "-n", "200", "--no-progress", "--inference", "sonic",
                                  "--server", f"127.0.0.1:{port}", "-p", "services.inference.fallback=false",
                                  "--timing-json", "t.json", "-o", "out.root"],
                                 capture_output=True, text=True, timeout=180, cwd=tmp_path)
        finally:
            nginx.send_signal(signal.SIGQUIT)
            nginx.wait(30)
    assert job.returncode == 0, job.stderr
    report = json.loads((tmp_path / "t.json").read_text())["inference"]
    answered = report["models"]["demo_mlp"]["answers"][f"127.0.0.1:{port}"]
    assert answered > 1  # both servers answered part of the job's requests (round robin)
    assert list(report["partial_statistics"]) == [f"127.0.0.1:{port}"], report
    rows = [line for line in job.stdout.splitlines() if line.startswith(f"127.0.0.1:{port}")]
    assert rows and all(row.split()[1] == "*" for row in rows), job.stdout  # the row is marked ...
    assert f"* 127.0.0.1:{port}: not one server's totals" in job.stdout  # ... and says why
