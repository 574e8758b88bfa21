"""Remote inputs against real servers on loopback: an XRootD server (Debian's xrootd-server) and an HTTP server
with byte-range support, both started here. A remote run must equal the local one; transient errors are retried;
a dead or missing file is one line naming it; grid jobs (local executor and the real Slurm) read root:// inputs.
"""

from __future__ import annotations

import http.server
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

import sonic_hep.modules.common.collections  # noqa: F401 - registers the module types used in-process
from sonic_hep.framework import Process, SourceError, remote
from sonic_hep.framework import config as cfgmod
from sonic_hep.workflows.compare import compare_files
from tests.grid.samples import analysis_config, write_nano
from tests.polling import wait_for

pytest.importorskip("fsspec_xrootd", reason="pip install 'sonic-hep[remote]'")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


class XRootDServer:
    """``xrootd`` serving ``folder`` on a free loopback port (run as ``nobody`` when we are root: it refuses root)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.port = _free_port()
        work = Path(tempfile.mkdtemp(prefix="sonic-xrootd-run-"))
        os.chmod(work, 0o777)
        config = work / "xrootd.cfg"
        config.write_text(f"all.export {folder}\nxrd.port {self.port}\nall.adminpath {work}\nall.pidpath {work}\n"
                          f"xrd.network nodnr\n")
        os.chmod(config, 0o644)
        self.work = work
        command = [shutil.which("xrootd"), "-c", str(config), "-l", str(work / "xrootd.log"), "-n", "sonictest"]
        if os.geteuid() == 0:
            command[1:1] = ["-R", "nobody"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        wait_for(lambda: _listening(self.port) or self.process.poll() is not None, timeout=20)
        if self.process.poll() is not None:
            raise RuntimeError(f"xrootd exited with {self.process.returncode}; log in {work}")

    def url(self, path: Path) -> str:
        return f"root://127.0.0.1:{self.port}/{path}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.work, ignore_errors=True)


@pytest.fixture(scope="session")
def served(tmp_path_factory) -> Path:
    """A folder every user may read (xrootd runs as nobody): two NanoAOD-like input files."""
    folder = Path(tempfile.mkdtemp(prefix="sonic-remote-data-"))
    os.chmod(folder, 0o755)
    write_nano(folder / "a.root", 120, seed=21, first_event=1)
    write_nano(folder / "b.root", 80, seed=22, first_event=5001)
    for path in folder.iterdir():
        os.chmod(path, 0o644)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def xrootd(served) -> XRootDServer:
    """A real XRootD server for the session (skipped where Debian's xrootd-server is not installed)."""
    if shutil.which("xrootd") is None:
        pytest.skip("xrootd is not installed (apt-get install xrootd-server; .ci/system-deps does it)")
    server = XRootDServer(served)
    yield server
    server.stop()


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files with ``Range: bytes=a-b`` (206) and can fail the next N range requests with 503.

    uproot 5 reads http(s) through fsspec, which sends one range per request (several requests at once), so one
    range per request is all it needs; a multi-range request gets the whole file (200), which RFC 9110 allows."""

    def log_message(self, *args):  # quiet
        pass

    def _fail(self) -> bool:
        server = self.server
        with server.lock:
            if server.fail_next > 0:
                server.fail_next -= 1
                server.failed += 1
                failing = True
            else:
                failing = False
        if failing:
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
        return failing

    def do_GET(self):
        if "Range" in self.headers and self._fail():  # reads of data fail, size queries (HEAD) do not
            return
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        path = self.translate_path(self.path)
        if not match or not os.path.isfile(path):
            return super().do_GET()
        data = Path(path).read_bytes()
        start = int(match.group(1))
        stop = min(len(data), int(match.group(2)) + 1 if match.group(2) else len(data))
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")
        self.send_header("Content-Length", str(stop - start))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self.wfile.write(data[start:stop])


@pytest.fixture(scope="session")
def http_server(served):
    """An HTTP server with byte ranges on a free loopback port, serving the same folder."""

    def handler(*args, **kwargs):
        return RangeHandler(*args, directory=str(served), **kwargs)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.lock, server.fail_next, server.failed = threading.Lock(), 0, 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.base = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def https_server(served, tmp_path_factory):
    """The same server behind TLS, with a self-signed certificate for 127.0.0.1 made by openssl."""
    import ssl

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (.ci/system-deps installs it)")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)

    def handler(*args, **kwargs):
        return RangeHandler(*args, directory=str(served), **kwargs)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.lock, server.fail_next, server.failed = threading.Lock(), 0, 0
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.base, server.cert = f"https://127.0.0.1:{server.server_address[1]}", cert
    yield server
    server.shutdown()
    server.server_close()


def _run(config: Path, files: list[str], output: Path) -> Process:
    listed = "[" + ", ".join(f"'{f}'" for f in files) + "]"
    cfg = cfgmod.load(config, [f"source.files={listed}", f"output.file={output}", "options.streams=2"])
    Process(cfg).run(progress=False)
    return output


@pytest.fixture
def analysis(tmp_path) -> Path:
    return analysis_config(tmp_path / "analysis.yaml")


def test_xrootd_run_equals_the_local_run(xrootd, served, analysis, tmp_path):
    local = _run(analysis, [str(served / "a.root"), str(served / "b.root")], tmp_path / "local.root")
    remote_out = _run(analysis, [xrootd.url(served / "a.root"), xrootd.url(served / "b.root")],
                      tmp_path / "remote.root")
    comparison = compare_files(str(local), str(remote_out), atol=0, rtol=0)
    assert comparison.equal(), comparison.summary()
    assert comparison.entries[0] > 0


def test_xrootd_reads_retry_transient_errors(xrootd, served, analysis, tmp_path, monkeypatch):
    """XRootD errors of the kind a busy or restarting server gives ('[FATAL] Socket error') are injected into the
    client's first two vector reads; the run against the real server still equals the local one."""
    from fsspec_xrootd import XRootDFileSystem

    monkeypatch.setattr(remote, "BACKOFF_S", 0.01)
    real = XRootDFileSystem._cat_ranges
    failures = []

    async def flaky(self, *args, **kwargs):
        if len(failures) < 2:
            failures.append(1)
            raise OSError("Failed to read: [FATAL] Socket error")
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(XRootDFileSystem, "_cat_ranges", flaky)
    before = remote.retried
    out = _run(analysis, [xrootd.url(served / "b.root")], tmp_path / "remote.root")
    local = _run(analysis, [str(served / "b.root")], tmp_path / "local.root")
    assert len(failures) == 2 and remote.retried - before == 2
    comparison = compare_files(str(local), str(out), atol=0, rtol=0)
    assert comparison.equal(), comparison.summary()


def test_https_run_equals_the_local_run_and_transient_errors_are_retried(http_server, served, analysis, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(remote, "BACKOFF_S", 0.01)
    local = _run(analysis, [str(served / "a.root")], tmp_path / "local.root")
    before = remote.retried
    http_server.fail_next = 2  # the first two reads of the job get 503 Service Unavailable
    out = _run(analysis, [f"{http_server.base}/a.root"], tmp_path / "http.root")
    assert http_server.failed == 2
    assert remote.retried - before == 2
    comparison = compare_files(str(local), str(out), atol=0, rtol=0)
    assert comparison.equal(), comparison.summary()


def test_https_run_equals_the_local_run_and_an_untrusted_certificate_is_not_retried(https_server, served, analysis,
                                                                                     sonic_cli, tmp_path):
    local = _run(analysis, [str(served / "b.root")], tmp_path / "local.root")
    url = f"{https_server.base}/b.root"
    out = tmp_path / "https.root"
    sonic_cli("run", analysis, "-i", url, "-o", out, "-s", "2", "--no-progress", "-q",
              env={"SSL_CERT_FILE": str(https_server.cert)}, check=True, timeout=120)
    comparison = compare_files(str(local), str(out), atol=0, rtol=0)
    assert comparison.equal(), comparison.summary()
    result = sonic_cli("run", analysis, "-i", url, "-o", tmp_path / "untrusted.root", "--no-progress",
                       env={"SONIC_HEP_REMOTE_TRIES": "3"}, timeout=120)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and url in lines[0] and "certificate" in lines[0].lower(), result.stderr
    assert "gave up" not in lines[0]  # refused at once, not retried
    assert not (tmp_path / "untrusted.root").exists()


def test_a_server_that_keeps_failing_is_one_line_naming_the_file(http_server, analysis, tmp_path, monkeypatch):
    monkeypatch.setattr(remote, "BACKOFF_S", 0.01)
    url = f"{http_server.base}/a.root"
    http_server.fail_next = remote.TRIES
    try:
        with pytest.raises(SourceError) as info:
            _run(analysis, [url], tmp_path / "never.root")
    finally:
        http_server.fail_next = 0
    message = str(info.value)
    assert url in message and f"gave up after {remote.TRIES} tries" in message and "\n" not in message
    assert not (tmp_path / "never.root").exists()
    # the same while reading baskets, after the file was opened: the message names the file and entries
    listed = f"['{url}']"
    process = Process(cfgmod.load(analysis, [f"source.files={listed}", f"output.file={tmp_path / 'late.root'}"]))
    http_server.fail_next = remote.TRIES
    try:
        with pytest.raises(SourceError) as info:
            process.run(progress=False)
    finally:
        http_server.fail_next = 0
    message = str(info.value)
    assert url in message and f"gave up after {remote.TRIES} tries" in message and "\n" not in message
    assert "corrupt" not in message  # the network failed, not the file
    assert not (tmp_path / "late.root").exists()


def test_missing_remote_file_and_dead_server_are_named(xrootd, served, sonic_cli, tmp_path, analysis):
    missing = xrootd.url(served / "nope.root")
    result = sonic_cli("run", analysis, "-i", missing, "-o", tmp_path / "o.root", "--no-progress",
                       env={"SONIC_HEP_REMOTE_BACKOFF_S": "0.01"}, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"sonic: error: input file {missing!r} does not exist"]
    dead = f"root://127.0.0.1:{_free_port()}/{served / 'a.root'}"
    result = sonic_cli("run", analysis, "-i", dead, "-o", tmp_path / "o.root", "--no-progress",
                       env={"SONIC_HEP_REMOTE_BACKOFF_S": "0.01", "SONIC_HEP_REMOTE_TRIES": "2"}, timeout=120)
    assert result.returncode == 1
    lines = [line for line in result.stderr.strip().splitlines() if line.startswith("sonic: error:")]
    assert len(lines) == 1 and dead in lines[0] and "gave up after 2 tries" in lines[0], result.stderr
    assert not (tmp_path / "o.root").exists()


def test_transient_error_table():
    class Status(Exception):
        def __init__(self, status):
            self.status = status

    assert remote.transient(ConnectionResetError()) and remote.transient(TimeoutError())
    assert remote.transient(Status(503)) and not remote.transient(Status(403))
    assert remote.transient(OSError("Failed to open file: [FATAL] Connection error"))
    assert not remote.transient(OSError("Server responded with an error: [3010] Unable to open; permission denied"))
    assert remote.transient(OSError("Server responded with an error: [3024] overloaded"))
    assert remote.not_found(OSError("[ERROR] Server responded with an error: [3011] no such file"))
    assert not remote.transient(FileNotFoundError("x")) and not remote.transient(ValueError("x"))
    import ssl

    assert not remote.transient(ssl.SSLCertVerificationError(1, "certificate verify failed"))
    wrapped = FileNotFoundError("https://x/a.root")  # fsspec's size query wraps every failure this way
    wrapped.__cause__ = Status(503)
    assert remote.transient(wrapped) and not remote.not_found(wrapped)


def _task_outputs_equal_local(task_dir: Path, analysis: Path, served: Path, tmp_path: Path) -> None:
    from sonic_hep.workflows.grid.merge import merge
    from sonic_hep.workflows.grid.task import Task
    from tests.grid.samples import assert_same_events

    merged = tmp_path / "merged.root"
    merge(Task(task_dir), merged)
    local = _run(analysis, [str(served / "a.root"), str(served / "b.root")], tmp_path / "local.root")
    assert assert_same_events(merged, local) > 0


def test_remote_patterns(xrootd, served, http_server):
    from sonic_hep.workflows.grid.errors import GridError
    from sonic_hep.workflows.grid.inputs import resolve_inputs

    assert resolve_inputs([xrootd.url(served / "*.root")]) == [xrootd.url(served / "a.root"),
                                                               xrootd.url(served / "b.root")]
    with pytest.raises(GridError, match=r"no input file matches 'root://.*/nothing\*\.root'"):
        resolve_inputs([xrootd.url(served / "nothing*.root")])
    url = f"{http_server.base}/a.root?token=1"  # a query string is not a pattern
    assert resolve_inputs([url]) == [url]


def test_grid_jobs_read_root_inputs_on_the_local_executor(xrootd, served, analysis, sonic_cli, tmp_path):
    task_dir = tmp_path / "task"
    # a pattern is listed on the XRootD server (a.root, b.root in order), then split by events
    sonic_cli("submit", analysis, "--input", xrootd.url(served / "*.root"),
              "--output-dir", task_dir, "--events-per-job", "100", "--wait", "--timeout", "120", check=True,
              timeout=180)
    assert all("root://" in (task_dir / "jobs" / job / "command.sh").read_text()
               for job in os.listdir(task_dir / "jobs"))
    _task_outputs_equal_local(task_dir, analysis, served, tmp_path)


@pytest.mark.slurm
def test_grid_jobs_read_root_inputs_on_slurm(xrootd, served, analysis, sonic_cli, slurm, tmp_path):
    task_dir = tmp_path / "task"
    result = sonic_cli("submit", analysis, "--input", xrootd.url(served / "a.root"), xrootd.url(served / "b.root"),
                       "--output-dir", task_dir, "--executor", "slurm", "--files-per-job", "1",
                       "-E", "time=00:10:00", "--wait", "--timeout", "180", env=slurm.env, check=True, timeout=240)
    assert "2 done" in result.stdout
    _task_outputs_equal_local(task_dir, analysis, served, tmp_path)
