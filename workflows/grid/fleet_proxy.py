"""A fleet's gRPC proxy: ``sonic fleet start --proxy haproxy`` puts HAProxy in front of the fleet's servers.

Why: clients outside the fleet (another site, a laptop) get one address and one identity check instead of the
fleet directory's list of servers; the site keeps its servers out of reach. The proxy itself is
:class:`~sonic_hep.framework.inference.serving.GrpcProxy`; here it is kept by a small process, the *keeper*
(``python -m`` this module, started detached like the fleet's manager), which

* starts HAProxy and writes ``proxy/keeper.json`` (the address clients use, its TLS, whether tokens are asked,
  the servers in rotation), which ``sonic fleet status`` shows;
* every ``SYNC_S`` sets the proxy's servers to the fleet's live entries (``servers/*.json``, those without
  ``expired``), through HAProxy's admin socket: servers that join are used, those that leave take no new call;
* starts HAProxy again if it died;
* ends with the fleet (its ``stop`` file: once the servers have left, ``STOP_WAIT_S`` at most) or on SIGTERM
  (``sonic fleet stop``): HAProxy stops after the calls in flight, ``keeper.json`` is removed.

::

    FLEET/proxy/settings.json   what was asked (ProxyOptions), written by ``sonic fleet start``
    FLEET/proxy/keeper.json     the keeper's process, the proxy's address, its servers (while it runs)
    FLEET/proxy/haproxy.cfg     HAProxy's configuration (haproxy_config.py), haproxy.log its errors
    FLEET/logs/proxy-*.log      the keeper's log: every server that joined or left the proxy
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ...framework.inference import ProcessId
from ...framework.inference.serving import (BackendTls, GrpcProxy, ProxyOptions, ProxyUnavailable, TokenRules,
                                            read_entries)
from .errors import GridError
from .fleet import Fleet
from .records import read_json, write_json

log = logging.getLogger(__name__)

FOLDER = "proxy"
SETTINGS = "proxy/settings.json"
RECORD = "proxy/keeper.json"

#: seconds between two looks at the fleet directory
SYNC_S = 0.5

#: once the fleet stops, how long the proxy waits for its servers to leave before it stops itself
STOP_WAIT_S = 60.0


def write_settings(directory: Path, options: ProxyOptions) -> None:
    (directory / FOLDER).mkdir(mode=0o700, exist_ok=True)
    write_json(directory / SETTINGS, asdict(options))


def read_settings(directory: Path) -> ProxyOptions | None:
    data = read_json(directory / SETTINGS)
    if data is None:
        return None
    tokens = data.pop("tokens", None)
    return ProxyOptions(**data, tokens=TokenRules(**tokens) if tokens else None)


def record(directory: str | os.PathLike) -> dict[str, Any] | None:
    """``keeper.json`` while its keeper runs (address, ssl, tokens, servers), else None."""
    data = read_json(Path(directory) / RECORD)
    if not data or not ProcessId.from_dict(data["process"]).alive():
        return None
    return data


def live_servers(directory: Path) -> dict[str, str]:
    """The fleet's servers a client may use now: name → ``host:port``."""
    return {entry.name: entry.address for entry in read_entries(directory) if not entry.expired()}


def backend_tls(fleet: Fleet) -> BackendTls | None:
    """TLS to the fleet's servers when they speak it: the CA clients trust, the manager's client certificate."""
    spec = fleet.spec
    if not spec.tls_cert:
        return None
    bundle = None
    if spec.tls_client_cert and spec.tls_client_key:
        path = fleet.directory / FOLDER / "client.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(Path(spec.tls_client_cert).read_text().rstrip() + "\n")
            out.write(Path(spec.tls_client_key).read_text().rstrip() + "\n")
        bundle = str(path)
    return BackendTls(str(spec.client_root_certificates), bundle)


# -- the keeper ----------------------------------------------------------------------------------------------
class Keeper:
    """The proxy of one fleet and its servers, kept in step with the fleet directory."""

    def __init__(self, fleet: Fleet, options: ProxyOptions):
        self.fleet, self.options = fleet, options
        self.me = ProcessId.current()
        self.proxy: GrpcProxy | None = None
        self.servers: dict[str, str] | None = None  # what the proxy holds (None: not told yet)
        self._said: set[str] = set()  # changes already logged (a host that does not resolve is said once)

    def start(self) -> None:
        options = self.options
        if self.proxy is not None:  # started again after it died: the same port, so clients find it
            options = replace(options, port=self.proxy.port)
        self.proxy = GrpcProxy(self.fleet.directory / FOLDER, options, backend_tls(self.fleet)).start()
        self.servers = None
        self.sync()

    def sync(self) -> None:
        """The proxy's servers set to the fleet's live ones; changes logged and written to ``keeper.json``."""
        wanted = live_servers(self.fleet.directory)
        if wanted == self.servers:
            return
        for line in self.proxy.set_backends(wanted):
            if line not in self._said:
                log.info("proxy %s: %s", self.proxy.address, line)
                self._said.add(line)
        self.servers = held = self.proxy.servers  # a server skipped (its host does not resolve) is tried again
        write_json(self.fleet.directory / RECORD, {
            "process": self.me.to_dict(), "address": self.proxy.address, "ssl": bool(self.options.tls_cert),
            "tokens": asdict(self.options.tokens) if self.options.tokens else None,
            "haproxy_pid": self.proxy.process.pid if self.proxy.process else None,
            "config": str(self.proxy.config_path), "servers": dict(sorted(held.items()))})

    def run(self, stop: threading.Event) -> None:
        """Until SIGTERM, or until the fleet stopped and its servers left (``STOP_WAIT_S`` at most)."""
        stopping_since = None
        while not stop.is_set():
            if self.proxy.process is None or self.proxy.process.poll() is not None:
                log.warning("HAProxy of %s exited (code %s); starting it again", self.fleet.directory,
                            self.proxy.process.poll() if self.proxy.process else None)
                self.start()
            try:
                self.sync()
            except (OSError, GridError) as err:  # a socket hiccup, a record being replaced: next round
                log.warning("proxy %s: cannot update its servers now (%s)", self.proxy.address, err)
            if self.fleet.stopping:
                stopping_since = stopping_since or time.monotonic()
                if not self.servers or time.monotonic() - stopping_since > STOP_WAIT_S:
                    break
            stop.wait(SYNC_S)

    def close(self) -> None:
        if self.proxy is not None:
            code = self.proxy.stop()
            log.info("proxy %s stopped (HAProxy exit code %s)", self.proxy.address, code)
        (self.fleet.directory / RECORD).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}", description=__doc__)
    parser.add_argument("directory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    fleet = Fleet(Path(args.directory))
    options = read_settings(fleet.directory)
    if options is None:
        log.error("%s has no %s: start the proxy with `sonic fleet start --proxy haproxy`", fleet.directory, SETTINGS)
        return 2
    keeper = Keeper(fleet, options)
    try:
        keeper.start()
        keeper.run(stop)
    except ProxyUnavailable as err:
        log.error("the fleet's proxy cannot run: %s", err)
        return 1
    finally:
        keeper.close()
    return 0


# -- from the command line -----------------------------------------------------------------------------------
def start_proxy(fleet: Fleet, options: ProxyOptions, timeout: float = 60.0) -> dict[str, Any]:
    """Starts the keeper (detached, like the fleet's manager) and waits until its proxy listens; its record.

    Raises:
        GridError: the proxy did not start (the keeper's last line says why).
    """
    write_settings(fleet.directory, options)
    log_path = fleet.directory / "logs" / f"proxy-{time.strftime('%Y%m%d-%H%M%S')}.log"
    with open(log_path, "ab") as out:
        process = subprocess.Popen([sys.executable, "-m", "sonic_hep.workflows.grid.fleet_proxy", str(fleet.directory)],
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   cwd=fleet.task.description.workdir, start_new_session=True)
    deadline = time.monotonic() + timeout
    while (found := record(fleet.directory)) is None:
        if process.poll() is not None or time.monotonic() > deadline:
            lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
            why = lines[-1].partition(": ")[2] if lines else f"exit code {process.poll()}"
            raise GridError(f"the fleet's proxy did not start: {why} (log {log_path})")
        time.sleep(0.1)
    return found


def stop_proxy(directory: str | os.PathLike, timeout: float = 60.0) -> None:
    """Ends the keeper (SIGTERM; it stops HAProxy after the calls in flight) and waits for it."""
    data = read_json(Path(directory) / RECORD)
    if not data:
        return
    keeper = ProcessId.from_dict(data["process"])
    if keeper.alive():
        try:
            os.kill(keeper.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
    deadline = time.monotonic() + timeout
    while keeper.alive():
        if time.monotonic() > deadline:
            raise GridError(f"the proxy keeper (pid {keeper.pid}) of {directory} did not stop in {timeout:.0f} s")
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
