"""A managed Triton server: the ``tritonserver`` of the ``nvidia-pytriton`` wheel, started and stopped by us.

::

    from sonic_hep.framework.inference.serving import TritonServer

    with TritonServer(["data/models/demo"]) as server:      # free ports, loopback, waits until ready
        print(server.grpc_url)                               # "127.0.0.1:40123"
        ...                                                   # SonicClient(servers=[server.grpc_url])
    # SIGTERM on exit; a clean stop removes the work folder

Each server gets a work folder holding its runtime repository (checksums verified, agents removed:
see ``runtime_repository.py``), its backend directory (``triton_install.py``) and its log. Several
servers run side by side (each chooses its own free ports). ``device="cpu"`` hides GPUs from the
server (the CPU fallback server); ``"gpu"`` serves models on their configured instance kinds, on the cards
``gpus`` chooses (``gpu_placement.py``). The python that runs python models (and our onnxruntime backend)
is selectable: the GPU machine runs its own python3.12 with torch, not this environment's.

Exposure (see the class): an endpoint that other machines reach without TLS is logged as a warning;
:meth:`TritonServer.bound` reads what the process really listens on from the kernel.

Nothing is left behind: the server gets SIGTERM when the process that started it dies, whatever killed
it and whichever thread started it (``spawner.py``); it runs with umask 077, so its python stubs'
shared memory is private (0600); a clean stop removes the work folder we made (kept after a failure, or
with ``keep_workdir`` / ``SONIC_HEP_KEEP_WORKDIR=1``); each new server removes the folders and shared
memory that servers of dead processes left (``owner.py``). What clients registered with the server and
could not unregister because they died is unregistered by the server's janitor (``shm_janitor.py``).

A server that cannot start raises :class:`InferenceError` with the end of its log; a fixed port that is
taken raises one line naming the port and, when visible, the process holding it.
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import logging
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...errors import InferenceError
from .. import keepalive
from . import runtime_repository
from ..owner import ProcessId, sweep_shared_memory
from . import server_log
from .servable import model_backend, native_library_for, one_line, unservable
from . import server_stop
from .command_line import CPU_ONLY_FLAGS, python_stub_flags, tls_flags
from .server_options import ServerOptions, parse_cpus  # noqa: F401 - parse_cpus: where the benchmarks find it
from .gpu_placement import card_count, gpu_instances, server_cards
from .shm_janitor import ShmJanitor
from .private_memory import make_private, preload_library
from ..repository import ModelInfo, ModelRepository
from .sockets import bind_problem, free_port, host_port, is_loopback, listening
from ..tls_probe import own_certificate
from .spawner import spawn
from .workdir import WorkFolder
from .triton_install import backend_directory, find_install, python_runtime, server_environment

log = logging.getLogger(__name__)

_LIVE: weakref.WeakSet[TritonServer] = weakref.WeakSet()
_numbers = itertools.count()

#: python-stub shared memory of our servers: ``sonic_triton_<owner tag>_<n>_...`` (see owner.py)
STUB_SHM_PATTERN = r"sonic_triton_(?P<tag>\d+-\d+)_"


class TritonServer:
    """One ``tritonserver`` process serving model repositories.

    Args:
        repository (ModelRepository | list[str]): the project's model repositories.
        options (ServerOptions | None): how it runs (``server_options.py``: device, backend, cores, binding,
            ports, TLS, work folder ...); default: ``ServerOptions()``.
        **overrides: single fields of ``options`` by name (``TritonServer(repos, backend="python")``).

    Raises:
        InferenceError: an option out of its bounds (one line: ``server backend must be one of ...``), a TLS
            certificate that expired, or cores this process does not have.

    ``host`` binds gRPC only: HTTP and metrics stay on loopback unless ``http_host`` / ``metrics_host`` say
    otherwise (HTTP inference has no TLS and would bypass it). ``strict`` refuses to start when a model cannot
    be served; by default such models are left out, each logged with its reason (``skipped``).
    """

    def __init__(self, repository: ModelRepository | Iterable[str | os.PathLike], options: ServerOptions | None = None,
                 **overrides: Any):
        # keywords are ServerOptions' fields, for code and tests that set one or two of them
        options = dataclasses.replace(options or ServerOptions(), **overrides).checked(
            error=lambda problem: InferenceError(f"server {problem.key} {problem.message}"))
        self.options = options
        for path, what in ((options.tls_cert, "TLS certificate"), (options.tls_root_cert, "TLS root certificate")):
            refusal, warning = own_certificate(path, what) if path else (None, None)
            if refusal:
                raise InferenceError(refusal)
            if warning:
                log.warning("%s", warning)
        self.tls = {"cert": options.tls_cert, "key": options.tls_key, "root": options.tls_root_cert}
        self.cpus = options.cpus
        if self.cpus is not None:
            unknown = set(self.cpus) - os.sched_getaffinity(0)
            if unknown:
                raise InferenceError(f"server cpus {self.cpus} are not a non-empty subset of this process's cores "
                                     f"{sorted(os.sched_getaffinity(0))}")
        self.repository = repository if isinstance(repository, ModelRepository) else ModelRepository(list(repository))
        self.models = options.models
        self.host = options.host
        self.hosts = {"grpc": options.host, "http": options.http_host, "metrics": options.metrics_host}
        self._fixed_ports = {"grpc": options.grpc_port, "http": options.http_port, "metrics": options.metrics_port}
        self.ports: dict[str, int] = {}
        self.device = options.device
        #: the server's CUDA_VISIBLE_DEVICES (``gpu_placement.py``); None: every card, the variable left alone
        self.gpu_cards = server_cards(options.device, options.gpus)
        #: ``{model: {card: instances}}`` of its KIND_GPU groups, set by start()
        self.gpu_instances: dict[str, dict[str, int]] = {}
        self.backend = options.backend
        #: which backend serves each served model ("onnxruntime (native)", "python", ...), set by start()
        self.model_backends: dict[str, str] = {}
        self.python = python_runtime(options.python)
        self.extra_env = dict(options.env)
        self.backends = {name: Path(folder) for name, folder in options.backends.items()} or None
        self.ort_threads = options.ort_threads
        self.python_shm_mb = options.python_shm_mb
        self.model_control = options.model_control
        self.log_verbose = options.log_verbose
        self.startup_timeout = options.startup_timeout
        #: Triton's --exit-timeout-secs, from stop_timeout_s and the instances it runs (server_stop.py), set by start()
        self.exit_timeout = server_stop.exit_timeout_s(options.stop_timeout_s, 1)
        self.served: list[str] = []
        self.strict = options.strict
        #: models left out because this server cannot serve them: ``{name: reason}`` (see ``servable.py``)
        self.skipped: dict[str, str] = {}
        self.process: subprocess.Popen | None = None
        self._log_file: Any = None
        self.shm_janitor_s = float(options.shm_janitor_s)
        self.janitor: ShmJanitor | None = None
        self.owner = ProcessId.current()
        self._shm_prefix = f"sonic_triton_{self.owner.tag}_{next(_numbers)}_"
        self.folder = WorkFolder.make(options.workdir, options.keep_workdir)
        self.workdir = self.folder.path

    # -- addresses -------------------------------------------------------------------------------------
    @staticmethod
    def _reach(host: str) -> str:
        """Where a client on this machine connects to an endpoint bound to ``host``."""
        if host in ("0.0.0.0", ""):
            return "127.0.0.1"
        return "::1" if host == "::" else host

    @property
    def client_host(self) -> str:
        """Where clients connect to gRPC (loopback when the server binds every interface)."""
        return self._reach(self.host)

    @property
    def grpc_url(self) -> str:
        return host_port(self.client_host, self.ports["grpc"])

    @property
    def http_url(self) -> str:
        return host_port(self._reach(self.hosts["http"]), self.ports["http"])

    @property
    def metrics_url(self) -> str:
        return f"http://{host_port(self._reach(self.hosts['metrics']), self.ports['metrics'])}/metrics"

    def bound(self) -> dict[str, list[str]]:
        """``{"grpc": ["0.0.0.0:8001"], "http": [...], "metrics": [...]}``: what the process listens on
        now, read from the kernel (empty lists when it does not run)."""
        sockets = listening(self.pid) if self.alive() else []
        return {kind: [host_port(h, p) for h, p in sockets if p == port] for kind, port in self.ports.items()}

    def exposure_warnings(self) -> list[str]:
        """One line per endpoint that other machines can reach without TLS."""
        what = {"grpc": "gRPC inference without TLS (give --tls-cert and --tls-key)",
                "http": "HTTP inference, plain and unauthenticated (Triton has no TLS for HTTP)",
                "metrics": "metrics, plain and unauthenticated"}
        return [f"{kind} on {host_port(host, self.ports.get(kind, '?'))} is reachable from other machines: "
                f"{what[kind]}" for kind, host in self.hosts.items()
                if not is_loopback(host) and not (kind == "grpc" and self.tls["cert"])]

    @property
    def log_path(self) -> Path:
        return self.workdir / "tritonserver.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    # -- life cycle ------------------------------------------------------------------------------------
    def start(self) -> TritonServer:
        """Prepares the work folder, starts the process and waits until every model is ready.

        A model whose load fails (a model file its backend refuses) is left out with Triton's reason
        (``skipped``) and the server started again without it, unless ``strict`` or no model loaded.

        Raises:
            InferenceError: a fixed port is taken (one line naming the port and its holder), or the server
                did not become ready (with its log; the work folder is then kept).
        """
        if self.process is not None:
            raise InferenceError(f"server {self.grpc_url} is already started")
        sweep_shared_memory(STUB_SHM_PATTERN)
        self._check_fixed_ports()
        self.workdir.mkdir(parents=True, exist_ok=True)
        repo_dir = self.workdir / "repository"
        shutil.rmtree(repo_dir, ignore_errors=True)
        try:
            served = self._prepare_repository(repo_dir)
        except BaseException:  # a model refused before anything ran: its work folder is not left behind
            self._clean_workdir(clean_stop=True)
            raise
        self.served = [info.name for info in served]
        if self.device == "gpu":
            self.gpu_instances = gpu_instances(repo_dir, self.served, self.gpu_cards)
        native = native_library_for(served, self.backend, self.python)
        self.model_backends = {info.name: model_backend(info, native is not None) for info in served}
        backend_dir = backend_directory(self.workdir / "backends", self.python, self.backends, native_library=native)
        for attempt in range(3):
            self.ports = {k: v or free_port(self.hosts[k]) for k, v in self._fixed_ports.items()}
            log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
            self._spawn(repo_dir, backend_dir)
            try:
                self._wait_ready()
                break
            except InferenceError as err:
                taken = "already in use" in self.log_tail(40).lower()
                self._kill()
                if taken:
                    self._check_fixed_ports()  # a fixed port taken since the first check: say which, by whom
                unloadable = not taken and attempt < 2 and self._leave_out_unloadable(repo_dir, log_start)
                if not ((taken or unloadable) and attempt < 2):
                    self._keep(f"the server did not start: {str(err).splitlines()[0]}")
                    raise err from None
                if taken:
                    log.info("a free port we chose was taken by another process before the server bound it; "
                             "retrying with new ports")
        _LIVE.add(self)
        self.folder.record(self.pid)
        if self.shm_janitor_s:  # frees what clients that died left registered (and so mapped) in the server
            self.janitor = ShmJanitor(self.http_url, self.pid, self.shm_janitor_s, label=self.grpc_url).start()
        opened = make_private(self.shm_prefix)
        if opened:
            log.warning("made %d shared memory regions of the server private (0600) after they were created",
                        len(opened))
        for warning in self.exposure_warnings():
            log.warning("EXPOSED: %s", warning)
        endpoints = ", ".join(f"{kind} {' '.join(addresses) or 'nothing'}" for kind, addresses in self.bound().items())
        log.info("Triton server ready, pid %d, listening on %s; models %s; log %s", self.pid, endpoints,
                 self.served, self.log_path)
        return self

    def _prepare_repository(self, repo_dir: Path) -> list[ModelInfo]:
        """The runtime repository of the servable models in ``repo_dir`` (runtime_repository.prepare); a
        server pinned to some cores runs at most one CPU instance of a GPU group per core it has."""
        return runtime_repository.prepare(self.repository, repo_dir, self._servable(), self.device,
                                          len(self.cpus) if self.cpus else None,
                                          card_count(self.gpu_cards) if self.device == "gpu" else None)

    def _servable(self) -> list[str]:
        """The models to serve: those asked for (default: all) less those this server cannot serve, which
        are logged with their reasons (``skipped``); with ``strict`` they are an error instead.

        Raises:
            InferenceError: with ``strict`` and a model that cannot be served, or when none can be.
        """
        names = self.models if self.models is not None else self.repository.names()
        infos = [self.repository.get(name) for name in names]  # an unknown name stays an error
        self.skipped = unservable(infos, self.python.executable, list(self.backends or {}))
        if self.skipped and (self.strict or len(self.skipped) == len(names)):
            why = "strict: every model must be served" if self.strict else "no model can be served"
            raise InferenceError(f"cannot start the Triton server ({why}): {one_line(self.skipped)}")
        for name, reason in self.skipped.items():
            log.warning("model %r is not served: %s", name, reason)
        return [name for name in names if name not in self.skipped]

    def _leave_out_unloadable(self, repo_dir: Path, log_start: int) -> bool:
        """After a start that failed: the models whose load failed (Triton's log after ``log_start``) join
        ``skipped`` with Triton's reason and leave the runtime repository, so that the next start serves
        the rest (the pip server stops at one model that does not load: ``--exit-on-error``). False, and
        nothing changed, with ``strict``, or when no model, or every model, failed to load."""
        failed = {name: why for name, why in server_log.load_failures(self.log_path, log_start).items()
                  if name in self.served}
        if self.strict or not failed or len(failed) == len(self.served):
            return False
        for name, why in failed.items():
            self.skipped[name] = f"it did not load: {why}"
            log.warning("model %r is not served: %s", name, self.skipped[name])
            self.served.remove(name)
            self.model_backends.pop(name, None)
            shutil.rmtree(repo_dir / name, ignore_errors=True)
        return True

    def _check_fixed_ports(self) -> None:
        for kind, port in self._fixed_ports.items():
            if port:
                problem = bind_problem(self.hosts[kind], port)
                if problem:
                    raise InferenceError(f"cannot start the Triton server: {kind} {problem}")

    def command(self, repo_dir: Path, backend_dir: Path) -> list[str]:
        """The ``tritonserver`` command line."""
        cmd = [str(find_install().binary), f"--model-repository={repo_dir}", f"--backend-directory={backend_dir}",
               f"--grpc-address={self.hosts['grpc']}", f"--grpc-port={self.ports['grpc']}",
               f"--http-address={self.hosts['http']}", f"--http-port={self.ports['http']}",
               f"--metrics-address={self.hosts['metrics']}", f"--metrics-port={self.ports['metrics']}",
               f"--model-control-mode={self.model_control}", f"--log-verbose={self.log_verbose}",
               "--exit-on-error=true", "--strict-readiness=true", f"--exit-timeout-secs={self._exit_timeout(repo_dir)}",
               *keepalive.SERVER_FLAGS]  # clients' keepalive pings accepted (keepalive.py)
        if self.model_control == "explicit":
            cmd += [f"--load-model={name}" for name in self.served]
        cmd += python_stub_flags(self.python_backends, self.shm_prefix, self.python_shm_mb)
        if self.device == "cpu":
            cmd += CPU_ONLY_FLAGS
        if self.options.response_compression != "none":  # answers compressed for clients that accept it
            cmd.append(f"--grpc-infer-response-compression-level={self.options.response_compression}")
        cmd += tls_flags(self.tls)
        return cmd

    @property
    def python_backends(self) -> list[str]:
        """Backends run by the python backend library: ``python`` and our python-based ones."""
        names = ["python"] + sorted(p.name for p in (self.workdir / "backends").iterdir() if (p / "model.py").exists())
        return names

    @property
    def shm_prefix(self) -> str:
        """This server's stub shared memory names; the owner's tag in it lets litter be swept."""
        return self._shm_prefix

    def _remove_stub_memory(self) -> None:
        """A killed server leaves its python stubs' shared memory in /dev/shm; remove ours."""
        for path in Path("/dev/shm").glob(self.shm_prefix + "*"):
            path.unlink(missing_ok=True)

    def _spawn(self, repo_dir: Path, backend_dir: Path) -> None:
        env = server_environment(self.python, {"SONIC_ORT_THREADS": str(self.ort_threads), **self.extra_env})
        if self.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        elif self.gpu_cards is not None:  # its own cards only: Triton would spread every group over all it sees
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_cards)
        private = preload_library()  # Boost sets the stubs' shared memory to 0644 whatever the umask
        if private:
            env["LD_PRELOAD"] = " ".join(filter(None, [private, env.get("LD_PRELOAD")]))
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        # umask 077: the python stubs' shared memory (and anything else the server creates) is ours alone
        self.process = spawn(self.command(repo_dir, backend_dir), cpus=self.cpus, stdout=self._log_file,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=self.workdir,
                             start_new_session=True, umask=0o077)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise InferenceError(f"Triton server on {self.grpc_url} exited (code {self.process.returncode}) "
                                     f"while starting; log {self.log_path}:\n{self.startup_problems()}")
            if self.ready() and self._all_bound():
                return
            time.sleep(0.1)
        raise InferenceError(f"Triton server on {self.grpc_url} not ready after {self.startup_timeout:.0f} s; "
                             f"log {self.log_path}:\n{self.log_tail()}")

    def _all_bound(self) -> bool:
        """Every endpoint listens. Triton answers health checks once HTTP is up but starts metrics after it, and
        exits when that port was taken meanwhile (a free port another process grabbed between our choice and
        its bind): until all are bound, "ready" may be a server on its way out. Where sockets cannot be read
        (no /proc), readiness alone decides."""
        if not os.path.exists("/proc/net/tcp"):
            return self.alive()
        # "nothing bound" is a server closing its sockets on its way out (a native-backend server is ready fast
        # enough to answer its first health check and then exit), never a pass; alive again at the end
        return all(self.bound().values()) and self.alive()

    def ready(self) -> bool:
        """True when the server answers and every model is loaded (HTTP ``/v2/health/ready``)."""
        try:
            with urllib.request.urlopen(f"http://{self.http_url}/v2/health/ready", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _exit_timeout(self, repo_dir: Path) -> int:
        self.exit_timeout = server_stop.server_exit_timeout_s(repo_dir, self.served, self.options.stop_timeout_s,
                                                              self.model_control == "explicit")
        return self.exit_timeout

    def stop(self, timeout: float | None = None) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout`` s (default: the bound ``server_stop.py`` sets from the
        instances it runs); returns the exit code.

        A clean stop (exit code 0) removes the work folder we made (in a folder the user chose: all but
        the log); after a server that had died or did not stop in time, the folder is kept for its log.
        """
        if self.process is None:
            return None
        self._stop_janitor()
        code = self.process.poll()
        died_before = code is not None
        if code is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            timeout = server_stop.stop_bound_s(self.exit_timeout) if timeout is None else timeout
            asked = time.monotonic()
            try:
                code = self.process.wait(timeout)
                log.info("Triton server %s stopped in %.1f s (exit code %s, bound %.0f s)", self.grpc_url,
                         time.monotonic() - asked, code, timeout)
            except subprocess.TimeoutExpired:
                log.warning("Triton server %s did not stop in %.0f s; killing it", self.grpc_url, timeout)
                code = self._kill()
        self._reap_group()
        self._close_log()
        self._remove_stub_memory()
        _LIVE.discard(self)
        self.process = None
        self._clean_workdir(clean_stop=code == 0 and not died_before)
        return code

    def kill(self) -> None:
        """SIGKILL (a crash, for failover tests); the process group goes with it."""
        self._kill()

    def _kill(self) -> int | None:
        if self.process is None:
            return None
        self._stop_janitor()
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        code = self.process.wait()
        self._close_log()
        self._remove_stub_memory()
        return code

    def _stop_janitor(self) -> None:
        janitor, self.janitor = self.janitor, None
        if janitor is not None:
            janitor.stop()

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

    # -- the work folder (workdir.py) -------------------------------------------------------------------
    def _keep(self, reason: str) -> None:
        self.folder.keep_for(reason, self.pid)

    def _clean_workdir(self, clean_stop: bool) -> None:
        self.folder.clean(clean_stop, self.pid)

    # -- reports ---------------------------------------------------------------------------------------
    def log_tail(self, lines: int = 25) -> str:
        return server_log.log_tail(self.log_path, lines)

    def startup_problems(self) -> str:
        """Why the server did not start (``server_log.py``)."""
        return server_log.startup_problems(self.log_path)

    def describe(self) -> dict[str, Any]:
        """What ``sonic server status`` shows and stores."""
        return {"pid": self.pid, "host": self.host, "grpc": self.grpc_url, "tls": bool(self.tls["cert"]),
                "mutual_tls": bool(self.tls["root"]), "http": self.http_url, "metrics": self.metrics_url,
                "bound": self.bound(), "models": self.served, "device": self.device,
                "python": self.python.executable, "log": str(self.log_path), "workdir": str(self.workdir),
                "cpus": self.cpus, "gpus": self.gpu_cards, "gpu_instances": self.gpu_instances,
                "backend": self.backend, "model_backends": self.model_backends,
                "skipped": self.skipped, "stop_bound_s": server_stop.stop_bound_s(self.exit_timeout)}

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.grpc_url if self.ports else "not started"
        return f"TritonServer({where}, models={self.served or self.models})"


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        try:
            server.stop()  # its own bound (server_stop.py): a shorter one would kill it mid-teardown
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass
