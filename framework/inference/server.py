"""A managed Triton server: the ``tritonserver`` of the ``nvidia-pytriton`` wheel, started and stopped by us.

::

    from sonic_hep.framework.inference.server import TritonServer

    with TritonServer(["data/models/demo"]) as server:      # free ports, loopback, waits until ready
        print(server.grpc_url)                               # "127.0.0.1:40123"
        ...                                                   # SonicClient(servers=[server.grpc_url])
    # SIGTERM on exit; the log stays in server.log_path

Each server gets a work folder holding its runtime repository (checksums verified, agents removed:
see ``runtime_repository.py``), its backend directory (``triton_install.py``) and its log. Several
servers run side by side (each chooses its own free ports). gRPC may use TLS (readiness is checked
over HTTP, which stays plain: bind it to loopback). ``device="cpu"`` hides GPUs from the
server (the CPU fallback server); ``"gpu"`` serves models on their configured instance kinds. The
python that runs python models (and our onnxruntime backend) is selectable: the GPU machine runs its
own python3.12 with torch, not this environment's.

A server that cannot start raises :class:`InferenceError` with the end of its log.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import InferenceError
from . import runtime_repository
from .repository import ModelRepository
from .triton_install import backend_directory, find_install, python_runtime, server_environment

log = logging.getLogger(__name__)

_LIVE: weakref.WeakSet[TritonServer] = weakref.WeakSet()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (another process may still take it before we bind)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class TritonServer:
    """One ``tritonserver`` process serving model repositories.

    Args:
        repository (ModelRepository | list[str]): the project's model repositories.
        models (list[str] | None): models to serve (default: all in the repositories).
        host (str): address to bind; loopback by default ("0.0.0.0" to serve other machines).
        grpc_port, http_port, metrics_port (int | None): ports; None chooses free ones.
        device (str): "cpu" (GPUs hidden) or "gpu".
        python (str | None): interpreter for python models (default: this one).
        workdir (str | None): folder for the runtime repository, backends and log (default: a new temp folder).
        env (dict | None): extra environment for the server (and its python models).
        backends (dict | None): extra python-based backends, ``{name: folder with model.py}``.
        ort_threads (int): onnxruntime intra-op threads per model instance (unless its config says).
        model_control (str): "none" (load everything at start) or "explicit" (load/unload through the API).
        tls_cert, tls_key (str | None): PEM server certificate and key: gRPC over TLS.
        tls_root_cert (str | None): PEM root certificate of client certificates: mutual TLS.
        log_verbose (int): Triton's ``--log-verbose`` level.
        startup_timeout (float): seconds to wait for readiness.
        cpus (Iterable[int] | None): CPU cores the server (and its python stubs) may run on, so that
            a server sharing a node with jobs gets cores of its own (default: all of this process's).
    """

    def __init__(self, repository: ModelRepository | Iterable[str | os.PathLike], *, models: list[str] | None = None,
                 host: str = "127.0.0.1", grpc_port: int | None = None, http_port: int | None = None,
                 metrics_port: int | None = None, device: str = "cpu", python: str | None = None,
                 workdir: str | os.PathLike | None = None, env: dict[str, str] | None = None,
                 backends: dict[str, Path] | None = None, ort_threads: int = 1, model_control: str = "none",
                 log_verbose: int = 0, startup_timeout: float = 180.0, tls_cert: str | None = None,
                 tls_key: str | None = None, tls_root_cert: str | None = None, cpus: Iterable[int] | None = None):
        if device not in ("cpu", "gpu"):
            raise InferenceError(f"server device must be 'cpu' or 'gpu', not {device!r}")
        if model_control not in ("none", "explicit"):
            raise InferenceError(f"model_control must be 'none' or 'explicit', not {model_control!r}")
        if bool(tls_cert) != bool(tls_key) or (tls_root_cert and not tls_cert):
            raise InferenceError("TLS needs both tls_cert and tls_key (and tls_root_cert only with them, for mutual TLS)")
        for path in (tls_cert, tls_key, tls_root_cert):
            if path and not os.path.isfile(path):
                raise InferenceError(f"TLS file {path} does not exist")
        self.tls = {"cert": tls_cert, "key": tls_key, "root": tls_root_cert}
        self.cpus = sorted(set(cpus)) if cpus is not None else None
        if self.cpus is not None:
            unknown = set(self.cpus) - os.sched_getaffinity(0)
            if not self.cpus or unknown:
                raise InferenceError(f"server cpus {self.cpus} are not a non-empty subset of this process's cores "
                                     f"{sorted(os.sched_getaffinity(0))}")
        self.repository = repository if isinstance(repository, ModelRepository) else ModelRepository(list(repository))
        self.models = models
        self.host = host
        self._fixed_ports = {"grpc": grpc_port, "http": http_port, "metrics": metrics_port}
        self.ports: dict[str, int] = {}
        self.device = device
        self.python = python_runtime(python)
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="sonic-triton-"))
        self.extra_env = dict(env or {})
        self.backends = backends
        self.ort_threads = ort_threads
        self.model_control = model_control
        self.log_verbose = log_verbose
        self.startup_timeout = startup_timeout
        self.served: list[str] = []
        self.process: subprocess.Popen | None = None
        self._log_file: Any = None

    # -- addresses -------------------------------------------------------------------------------------
    @property
    def client_host(self) -> str:
        """Where clients connect (loopback when the server binds every interface)."""
        return "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host

    @property
    def grpc_url(self) -> str:
        return f"{self.client_host}:{self.ports['grpc']}"

    @property
    def http_url(self) -> str:
        return f"{self.client_host}:{self.ports['http']}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.client_host}:{self.ports['metrics']}/metrics"

    @property
    def log_path(self) -> Path:
        return self.workdir / "tritonserver.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    # -- life cycle ------------------------------------------------------------------------------------
    def start(self) -> TritonServer:
        """Prepares the work folder, starts the process and waits until every model is ready."""
        if self.process is not None:
            raise InferenceError(f"server {self.grpc_url} is already started")
        self.workdir.mkdir(parents=True, exist_ok=True)
        repo_dir = self.workdir / "repository"
        shutil.rmtree(repo_dir, ignore_errors=True)
        served = runtime_repository.prepare(self.repository, repo_dir, self.models, self.device)
        self.served = [info.name for info in served]
        backend_dir = backend_directory(self.workdir / "backends", self.python, self.backends)
        auto_ports = not all(self._fixed_ports.values())
        for attempt in range(3):
            self.ports = {k: v or free_port(self.host) for k, v in self._fixed_ports.items()}
            self._spawn(repo_dir, backend_dir)
            try:
                self._wait_ready()
                break
            except InferenceError as err:
                taken = "already in use" in self.log_tail(40).lower()
                self._kill()
                if not (taken and auto_ports and attempt < 2):
                    raise err from None
                log.info("a chosen port was taken meanwhile; retrying with new ports")
        _LIVE.add(self)
        log.info("Triton server ready on %s (grpc), %s (http), pid %d, models %s; log %s", self.grpc_url,
                 self.http_url, self.pid, self.served, self.log_path)
        return self

    def command(self, repo_dir: Path, backend_dir: Path) -> list[str]:
        """The ``tritonserver`` command line."""
        cmd = [str(find_install().binary), f"--model-repository={repo_dir}", f"--backend-directory={backend_dir}",
               f"--grpc-address={self.host}", f"--grpc-port={self.ports['grpc']}",
               f"--http-address={self.host}", f"--http-port={self.ports['http']}",
               f"--metrics-address={self.host}", f"--metrics-port={self.ports['metrics']}",
               f"--model-control-mode={self.model_control}", f"--log-verbose={self.log_verbose}",
               "--exit-on-error=true", "--strict-readiness=true"]
        if self.model_control == "explicit":
            cmd += [f"--load-model={name}" for name in self.served]
        for backend in self.python_backends:  # stub shared memory named after this server, so stop() can clean it
            cmd.append(f"--backend-config={backend},shm-region-prefix-name={self.shm_prefix}")
        if self.device == "cpu":
            cmd += ["--pinned-memory-pool-byte-size=0", "--cuda-memory-pool-byte-size=0:0"]
        if self.tls["cert"]:
            cmd += [f"--grpc-server-cert={os.path.abspath(self.tls['cert'])}",
                    f"--grpc-server-key={os.path.abspath(self.tls['key'])}"]
            if self.tls["root"]:
                cmd += ["--grpc-use-ssl-mutual=true", f"--grpc-root-cert={os.path.abspath(self.tls['root'])}"]
            else:
                cmd.append("--grpc-use-ssl=true")
        return cmd

    @property
    def python_backends(self) -> list[str]:
        """Backends run by the python backend library: ``python`` and our python-based ones."""
        names = ["python"] + sorted(p.name for p in (self.workdir / "backends").iterdir() if (p / "model.py").exists())
        return names

    @property
    def shm_prefix(self) -> str:
        return f"sonic_triton_{os.getpid()}_{id(self):x}_"

    def _remove_stub_memory(self) -> None:
        """A killed server leaves its python stubs' shared memory in /dev/shm; remove ours."""
        for path in Path("/dev/shm").glob(self.shm_prefix + "*"):
            path.unlink(missing_ok=True)

    def _spawn(self, repo_dir: Path, backend_dir: Path) -> None:
        env = server_environment(self.python, {"SONIC_ORT_THREADS": str(self.ort_threads), **self.extra_env})
        if self.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        main_thread = threading.current_thread() is threading.main_thread()
        cpus = self.cpus

        def in_child() -> None:  # before exec, so every thread and python stub of the server inherits it
            _die_with_parent()
            if cpus is not None:
                os.sched_setaffinity(0, cpus)

        self.process = subprocess.Popen(self.command(repo_dir, backend_dir), stdout=self._log_file,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                        cwd=self.workdir, start_new_session=True,
                                        preexec_fn=in_child if main_thread else None)
        if cpus is not None and not main_thread:  # no preexec_fn off the main thread: pin right after exec
            os.sched_setaffinity(self.process.pid, cpus)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise InferenceError(f"Triton server on {self.grpc_url} exited (code {self.process.returncode}) "
                                     f"while starting; log {self.log_path}:\n{self.startup_problems()}")
            if self.ready():
                return
            time.sleep(0.1)
        raise InferenceError(f"Triton server on {self.grpc_url} not ready after {self.startup_timeout:.0f} s; "
                             f"log {self.log_path}:\n{self.log_tail()}")

    def ready(self) -> bool:
        """True when the server answers and every model is loaded (HTTP ``/v2/health/ready``)."""
        try:
            with urllib.request.urlopen(f"http://{self.http_url}/v2/health/ready", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout`` s; returns the exit code. Keeps the log, drops the rest."""
        if self.process is None:
            return None
        code = self.process.poll()
        if code is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                code = self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("Triton server %s did not stop in %.0f s; killing it", self.grpc_url, timeout)
                code = self._kill()
        self._reap_group()
        self._close_log()
        self._remove_stub_memory()
        _LIVE.discard(self)
        self.process = None
        for sub in ("repository", "backends"):
            shutil.rmtree(self.workdir / sub, ignore_errors=True)
        return code

    def kill(self) -> None:
        """SIGKILL (a crash, for failover tests); the process group goes with it."""
        self._kill()

    def _kill(self) -> int | None:
        if self.process is None:
            return None
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        code = self.process.wait()
        self._close_log()
        self._remove_stub_memory()
        return code

    def _reap_group(self) -> None:
        """Python stubs live in the server's process group; make sure none outlives it."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        # CPU-only start prints CUDA/NVML errors that mean nothing here
        useful = [line for line in text if "CUDA" not in line and "NVML" not in line and "DCGM" not in line]
        return "\n".join(useful[-lines:])

    def startup_problems(self) -> str:
        """Why the server did not start: each model's load error (first line) and Triton's last word;
        the end of the log when it says nothing more specific."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        problems = []
        for line in text:
            if line.startswith("E") and "failed to load '" in line:
                message = line.split('] "', 1)[-1].split("\\n", 1)[0].rstrip('"')
                problems.append("  " + message)
            elif line.startswith("error:"):
                problems.append("  " + line)
        return "\n".join(problems) if problems else self.log_tail()

    def describe(self) -> dict[str, Any]:
        """What ``sonic server status`` shows and stores."""
        return {"pid": self.pid, "host": self.host, "grpc": self.grpc_url, "tls": bool(self.tls["cert"]), "http": self.http_url,
                "metrics": self.metrics_url, "models": self.served, "device": self.device,
                "python": self.python.executable, "log": str(self.log_path), "cpus": self.cpus}

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.grpc_url if self.ports else "not started"
        return f"TritonServer({where}, models={self.served or self.models})"


def parse_cpus(text: str) -> list[int]:
    """A CPU list as ``taskset -c`` and Slurm write it (``"0-7,12,14-15"``) → sorted core numbers."""
    cpus: set[int] = set()
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    except ValueError:
        raise InferenceError(f"bad CPU list {text!r}: write it like 0-7,12") from None
    if not cpus:
        raise InferenceError(f"bad CPU list {text!r}: no cores in it")
    return sorted(cpus)


def _die_with_parent() -> None:
    """In the child: SIGTERM when the parent dies (a crashed job must not leave servers behind)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        try:
            server.stop(timeout=10)
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass
