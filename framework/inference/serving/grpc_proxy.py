"""A real L7 gRPC proxy (HAProxy) in front of Triton servers: one address for many servers, tokens checked there.

Why: a site that offers GPUs as a shared service gives its users one address and one identity check, and
keeps its servers out of reach (SuperSONIC puts Envoy there, IceCube HAProxy). Clients then need to know
nothing of the servers behind it: each call goes to the least busy one, a server that dies loses no call (the
proxy sends it again elsewhere; one whose answer had begun, the client retries), and servers join and leave
while clients stay connected. What the proxy is
told to do is ``haproxy_config.py``; this module runs it::

    with GrpcProxy(folder, ProxyOptions(port=8001)) as proxy:     # starts haproxy, waits until it listens
        proxy.set_backends({"0000": "node1:8001", "0001": "node2:8001"})   # through its admin socket
        ...                                                        # clients: servers: [proxy.address]
    # stopped: calls in flight finish (HARD_STOP_S at most)

The servers change at run time through HAProxy's admin socket (a Unix socket, mode 600, in ``folder``): no
reload, so the clients' HTTP/2 connections and their calls in flight are not cut. A fleet keeps its proxy's
servers in step with its directory (``workflows/grid/fleet_proxy.py``).

The process gets SIGTERM when the process that started it dies (``spawner.py``). A missing ``haproxy``, or one
too old to verify tokens (``jwt_verify`` came in 2.5), is one line saying what to install.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ...errors import InferenceError
from .haproxy_config import BACKEND, HARD_STOP_S, SLOT, BackendTls, TokenRules, render
from .sockets import bind_problem, free_port, host_port, is_loopback
from .spawner import spawn

log = logging.getLogger(__name__)

#: HAProxy's first version with ``jwt_verify`` (tokens); without tokens any HTTP/2-capable one (2.0) does
TOKEN_VERSION = (2, 5)
MIN_VERSION = (2, 0)

#: a Unix socket's path is limited to this many bytes (sun_path): a longer folder gets its socket in /tmp
SOCKET_PATH_MAX = 100


class ProxyUnavailable(InferenceError):
    """HAProxy cannot be used here; the message says what to install or change, in one line."""


@dataclass(frozen=True)
class ProxyOptions:
    """How the proxy listens and what it asks of callers.

    Args:
        host (str): address it listens on (``0.0.0.0``: every interface; then give it TLS).
        port (int): its port (0: a free one, chosen at start).
        tls_cert (str): certificate it presents to clients (PEM); with ``tls_key``, clients use TLS.
        tls_key (str): that certificate's key (PEM).
        tokens (TokenRules | None): the bearer token every call must carry; None: none asked.
        slots (int): servers it can hold at once.
    """

    host: str = "127.0.0.1"
    port: int = 0
    tls_cert: str = ""
    tls_key: str = ""
    tokens: TokenRules | None = None
    slots: int = 32

    def problem(self) -> str | None:
        """What is wrong with these options (one line), or None."""
        if bool(self.tls_cert) != bool(self.tls_key):
            return "the proxy's TLS needs both a certificate and its key (--proxy-tls-cert, --proxy-tls-key)"
        for path in (self.tls_cert, self.tls_key):
            if path and not Path(path).is_file():
                return f"the proxy's TLS file {path} does not exist"
        if self.slots < 1:
            return f"the proxy needs at least one server slot, not {self.slots}"
        if self.tokens and not self.tls_cert and not is_loopback(self.host):
            return (f"bearer tokens would reach the proxy on {self.host or '0.0.0.0'} in clear text, readable on the "
                    "way: give it a TLS certificate and key (--proxy-tls-cert, --proxy-tls-key) or listen on 127.0.0.1")
        return self.tokens.problem() if self.tokens else None


def preflight(options: ProxyOptions, server_host: str) -> tuple[str | None, str | None]:
    """What to check before anything starts: a problem that stops the proxy (bad options, no usable haproxy), and
    a warning worth a line: servers that listen beyond loopback while the proxy asks for tokens can be reached
    without one."""
    problem = options.problem()
    if problem is None:
        try:
            haproxy_program(options.tokens is not None)
        except ProxyUnavailable as err:
            problem = str(err)
    warning = None
    if options.tokens and not is_loopback(server_host):
        warning = (f"the servers listen on {server_host or '0.0.0.0'}: a client that reaches them directly skips the "
                   "proxy's token check; bind them to 127.0.0.1 (--host) or to a network only the proxy reaches")
    return problem, warning


def haproxy_program(tokens: bool) -> str:
    """The ``haproxy`` to run, checked to be recent enough (2.5 for tokens).

    Raises:
        ProxyUnavailable: not installed, or too old.
    """
    program = shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy")
                                               if os.access(p, os.X_OK)), None)
    if program is None:
        raise ProxyUnavailable("no haproxy on this machine: apt-get install haproxy (Debian 12 has 2.6)")
    try:
        banner = subprocess.run([program, "-v"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise ProxyUnavailable(f"{program} -v failed: {err}") from None
    found = re.search(r"version (\d+)\.(\d+)", banner)
    version = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
    needed = TOKEN_VERSION if tokens else MIN_VERSION
    if version < needed:
        what = "verify tokens (jwt_verify)" if tokens else "speak HTTP/2 to Triton"
        raise ProxyUnavailable(f"{program} is HAProxy {version[0]}.{version[1]}; {needed[0]}.{needed[1]} or later is "
                               f"needed to {what}")
    return program


class GrpcProxy:
    """One HAProxy process in front of Triton servers.

    Args:
        folder (Path): where its configuration, TLS bundle and admin socket go (created, private).
        options (ProxyOptions): how it listens, what it asks of callers.
        backend_tls (BackendTls | None): TLS to the servers (a fleet of TLS servers); None: clear text.
    """

    def __init__(self, folder: str | os.PathLike, options: ProxyOptions | None = None,
                 backend_tls: BackendTls | None = None):
        self.folder = Path(folder)
        self.options = options or ProxyOptions()
        self.backend_tls = backend_tls
        self.process: subprocess.Popen | None = None
        self.port = self.options.port
        self._slots: dict[str, int] = {}  # server name → its slot (1-based)
        self._addresses: dict[str, str] = {}  # server name → the host:port its slot was given
        self._socket_dir: str | None = None  # a short folder for the socket when ``folder``'s path is too long

    @property
    def address(self) -> str:
        """``host:port`` clients use (the bound host; ``0.0.0.0`` binds everywhere and is shown as this host)."""
        host = socket.getfqdn() if self.options.host in ("0.0.0.0", "::", "") else self.options.host
        return host_port(host, self.port)

    @property
    def admin_socket(self) -> Path:
        path = self.folder / "admin.sock"
        if len(str(path)) > SOCKET_PATH_MAX:
            if self._socket_dir is None:
                self._socket_dir = tempfile.mkdtemp(prefix="sonic-proxy-")
            path = Path(self._socket_dir) / "admin.sock"
        return path

    @property
    def config_path(self) -> Path:
        return self.folder / "haproxy.cfg"

    def start(self, timeout: float = 30.0) -> GrpcProxy:
        """Writes the configuration, has HAProxy check it, starts it and waits until it accepts connections.

        Raises:
            ProxyUnavailable: no usable haproxy, a bad option, a taken port, or HAProxy refused to start (with
                the end of what it said).
        """
        problem = self.options.problem()
        if problem:
            raise ProxyUnavailable(problem)
        program = haproxy_program(self.options.tokens is not None)
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.port == 0:
            self.port = free_port(self.options.host if self.options.host not in ("", "::") else "0.0.0.0")
        taken = bind_problem(self.options.host or "0.0.0.0", self.port)
        if taken:
            raise ProxyUnavailable(f"the proxy cannot listen: {taken}")
        text = render(host_port(self.options.host or "0.0.0.0", self.port), self.admin_socket, self.options.slots,
                      self._tls_bundle(), self.options.tokens, self.backend_tls)
        self.config_path.write_text(text)
        check = subprocess.run([program, "-c", "-f", str(self.config_path)], capture_output=True, text=True,
                               timeout=60, check=False)
        if check.returncode != 0:
            raise ProxyUnavailable(f"haproxy refused {self.config_path}: {_last_alert(check.stdout + check.stderr)}")
        log_path = self.folder / "haproxy.log"
        with open(log_path, "ab") as out:
            self.process = spawn([program, "-db", "-f", str(self.config_path)], stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop(timeout=5)
                said = log_path.read_text(errors="replace") if log_path.exists() else ""
                raise ProxyUnavailable(f"haproxy did not start ({_last_alert(said) or 'no message'}; {log_path})")
            time.sleep(0.05)
        log.info("gRPC proxy (HAProxy, pid %d) listening on %s%s%s", self.process.pid, self.address,
                 " with TLS" if self.options.tls_cert else "", ", bearer tokens required" if self.options.tokens else "")
        return self

    def _tls_bundle(self) -> str | None:
        """The certificate and key in one private PEM file, as HAProxy's ``crt`` reads them."""
        if not self.options.tls_cert:
            return None
        bundle = self.folder / "tls.pem"
        fd = os.open(bundle, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(Path(self.options.tls_cert).read_text().rstrip() + "\n")
            out.write(Path(self.options.tls_key).read_text().rstrip() + "\n")
        return str(bundle)

    def _answers(self) -> bool:
        try:
            self.command("show info")
        except OSError:
            return False
        return True

    # -- its servers, at run time ----------------------------------------------------------------------
    def command(self, line: str) -> str:
        """One command on the admin socket; HAProxy's answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(self.admin_socket))
            sock.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace").strip()

    def set_backends(self, servers: Mapping[str, str]) -> list[str]:
        """Makes the proxy's servers exactly ``servers`` (name → ``host:port``); returns what changed, one line each.

        A server that left is put in maintenance (calls in flight to it finish; no new one goes there); a new one
        gets a free slot and is used once its first check passes. A name whose host does not resolve is skipped
        (said in the changes) and tried again next time.
        """
        changes = []
        for name in sorted(set(self._slots) - set(servers)):
            slot = self._slots.pop(name)
            self._addresses.pop(name, None)
            self.command(f"set server {BACKEND}/{SLOT}{slot} state maint")
            changes.append(f"{name} left (slot {slot})")
        for name, address in sorted(servers.items()):
            if self._addresses.get(name) == address:
                continue
            host, _, port = address.rpartition(":")
            try:
                ip = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)[0][4][0]
            except (OSError, ValueError) as err:
                changes.append(f"{name} at {address} skipped: cannot resolve {host} ({err})")
                continue
            slot = self._slots.get(name) or self._free_slot()
            if slot is None:
                changes.append(f"{name} at {address} skipped: all {self.options.slots} slots are taken")
                continue
            answer = self.command(f"set server {BACKEND}/{SLOT}{slot} addr {ip} port {int(port)}")
            if "changed" not in answer and "no need" not in answer:
                changes.append(f"{name} at {address} skipped: {answer.splitlines()[0] if answer else 'no answer'}")
                continue
            self.command(f"set server {BACKEND}/{SLOT}{slot} state ready")
            self._slots[name], self._addresses[name] = slot, address
            changes.append(f"{name} joined at {address} (slot {slot})")
        return changes

    @property
    def servers(self) -> dict[str, str]:
        """The servers it holds now: name → ``host:port``."""
        return dict(self._addresses)

    def _free_slot(self) -> int | None:
        used = set(self._slots.values())
        return next((slot for slot in range(1, self.options.slots + 1) if slot not in used), None)

    def backends(self) -> dict[str, dict[str, object]]:
        """Per server in the proxy: its address, HAProxy's status (UP, DOWN, MAINT ...), the calls sent to it and
        those whose connection or answer failed there (each sent again to another server when it could be)."""
        stats = self.command("show stat")
        header, *rows = [line for line in stats.splitlines() if line]
        names = header.lstrip("# ").split(",")
        by_slot = {slot: name for name, slot in self._slots.items()}
        out = {}
        for row in rows:
            values = dict(zip(names, row.split(",")))
            if values.get("pxname") != BACKEND or not values.get("svname", "").startswith(SLOT):
                continue
            slot = int(values["svname"][len(SLOT):])
            if slot in by_slot:
                name = by_slot[slot]
                out[name] = {"address": self._addresses[name], "status": values.get("status", ""),
                             "calls": int(values.get("stot") or 0), "failed_answers": int(values.get("eresp") or 0),
                             "failed_connections": int(values.get("econ") or 0)}
        return out

    # -- the end ---------------------------------------------------------------------------------------
    def stop(self, timeout: float = HARD_STOP_S + 5.0) -> int | None:
        """Stops listening and lets calls in flight finish (SIGUSR1: HAProxy's soft stop, ``HARD_STOP_S`` at
        most), then SIGKILL after ``timeout``; returns the exit code."""
        if self.process is None:
            return None
        code = self.process.poll()
        if code is None:
            try:
                os.killpg(self.process.pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass
            try:
                code = self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("HAProxy (pid %d) did not stop in %.0f s; killing it", self.process.pid, timeout)
                os.killpg(self.process.pid, signal.SIGKILL)
                code = self.process.wait()
        self.process = None
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
        return code

    def __enter__(self) -> GrpcProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _last_alert(text: str) -> str:
    """HAProxy's last ALERT line (what it refused), else its last line; one line either way."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    alerts = [line for line in lines if "ALERT" in line]
    return (alerts or lines or [""])[-1][:400]
