"""A fleet's directory of servers on a shared filesystem: who serves what, where, and whether it still lives.

Each server of a fleet (a batch job running ``tritonserver``) owns one entry, ``<fleet>/servers/<name>.json``::

    {"name": "0003", "address": "gpu17.site:40123", "models": {"demo_mlp": "1"}, "health": "ready",
     "ssl": false, "root_certificates": null, "host": "gpu17", "pid": 4242, "batch_id": "1234_3",
     "started": 1764170000.0, "heartbeat": 1764170042.5, "ttl_s": 20.0}

* **Written whole or not at all**: each write goes to a temporary named after the writer's host and pid and
  is renamed over the entry (:class:`~sonic_hep.framework.atomic.PendingText`), so a reader on any node sees
  the previous or the next entry, never a part, whatever number of servers write at once (each writes only
  its own entry).
* **Expiry**: the server rewrites its entry every heartbeat; a reader ignores an entry whose ``heartbeat``
  is older than its ``ttl_s`` (a server job killed with SIGKILL, or a node that died, cannot remove its
  entry). On the reader's own host a dead ``pid`` expires the entry at once. Clocks of the nodes are
  assumed NTP-synchronised to well within ``ttl_s``.
* **Removal**: a server job that ends (stopped, cancelled, its server died) removes its entry first, so
  clients stop choosing it before it stops answering.

Readers (the SONIC client's :class:`~.servers.ServerPool`, ``sonic fleet status``, the autoscaler) call
:func:`live_entries` or :func:`discover`; nothing here talks to a server.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..atomic import PendingText, pid_alive, remove_stale_temporaries

if TYPE_CHECKING:  # the job wrapper reads FLEET_FILE from here without importing tritonclient
    from .connection import ServerSpec

log = logging.getLogger(__name__)

SERVERS = "servers"
#: what makes a folder a fleet directory (its settings: ``workflows/grid/fleet.py``)
FLEET_FILE = "fleet.json"
#: how often a server rewrites its entry, and after how long without one readers ignore it (defaults)
HEARTBEAT_S = 5.0
TTL_S = 20.0


@dataclass
class Entry:
    """One server's registration (see the module docstring)."""

    name: str
    address: str
    models: dict[str, str] = field(default_factory=dict)
    health: str = "ready"
    ssl: bool = False
    root_certificates: str | None = None
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    batch_id: str | None = None
    started: float = field(default_factory=time.time)
    heartbeat: float = field(default_factory=time.time)
    ttl_s: float = TTL_S

    def expired(self, now: float | None = None) -> str:
        """Why a reader must ignore this entry now ("" while it is live)."""
        now = time.time() if now is None else now
        if now - self.heartbeat > self.ttl_s:
            return f"no heartbeat for {now - self.heartbeat:.0f} s (limit {self.ttl_s:.0f} s)"
        if self.host == socket.gethostname() and not pid_alive(self.pid):
            return f"its process {self.pid} on {self.host} is gone"
        if self.health != "ready":
            return f"health {self.health}"
        return ""

    def spec(self, credentials: dict[str, Any] | None = None) -> ServerSpec:
        """How a client connects: the entry's address and TLS mode, with the client's own certificate
        (``private_key``, ``certificate_chain``) and, if given, its own ``root_certificates``."""
        from .connection import ServerSpec

        creds = dict(credentials or {})
        return ServerSpec(self.address, ssl=self.ssl or bool(creds),
                          root_certificates=creds.get("root_certificates") or self.root_certificates,
                          private_key=creds.get("private_key"), certificate_chain=creds.get("certificate_chain"))


def servers_dir(fleet: str | os.PathLike) -> Path:
    return Path(fleet) / SERVERS


def entry_path(fleet: str | os.PathLike, name: str) -> Path:
    return servers_dir(fleet) / f"{name}.json"


def register(fleet: str | os.PathLike, entry: Entry) -> Path:
    """Writes (or refreshes: the heartbeat) ``entry`` atomically; returns its path."""
    folder = servers_dir(fleet)
    folder.mkdir(parents=True, exist_ok=True)
    entry.heartbeat = time.time()
    pending = PendingText(str(entry_path(fleet, entry.name)), f"fleet entry {entry.name}")
    try:
        pending.write(json.dumps(asdict(entry), indent=1) + "\n")
        return Path(pending.commit())
    except BaseException:
        pending.abort()
        raise


def deregister(fleet: str | os.PathLike, name: str) -> None:
    """Removes a server's entry (and temporaries its dead writers left)."""
    path = entry_path(fleet, name)
    path.unlink(missing_ok=True)
    remove_stale_temporaries(str(path))


def read_entries(fleet: str | os.PathLike) -> list[Entry]:
    """Every entry in the directory, expired ones included (in name order); unreadable files are skipped
    with a debug line (only a foreign file can be partial: ours are renamed into place whole)."""
    entries = []
    for path in sorted(servers_dir(fleet).glob("*.json")):
        try:
            data = json.loads(path.read_text())
            entries.append(Entry(**data))
        except FileNotFoundError:
            continue  # removed between the listing and the read
        except (OSError, ValueError, TypeError) as err:
            log.debug("fleet entry %s is not readable: %s", path, err)
    return entries


def live_entries(fleet: str | os.PathLike, now: float | None = None) -> list[Entry]:
    """The entries a client may use now (see :meth:`Entry.expired`)."""
    return [e for e in read_entries(fleet) if not e.expired(now)]


def discover(fleet: str | os.PathLike, credentials: dict[str, Any] | None = None,
             clock: Callable[[], float] = time.time) -> Callable[[], list[ServerSpec]]:
    """The discovery callable a :class:`~.servers.ServerPool` calls at start and on each refresh: the live
    servers of the fleet at ``fleet`` as :class:`ServerSpec`, in the order of their names."""
    def current() -> list[ServerSpec]:
        return [entry.spec(credentials) for entry in live_entries(fleet, clock())]

    return current


def wait_for_servers(fleet: str | os.PathLike, timeout: float, poll_s: float = 0.5) -> list[Entry]:
    """The live entries, waiting up to ``timeout`` seconds for the first one (a fleet still starting)."""
    deadline = time.monotonic() + timeout
    while True:
        entries = live_entries(fleet)
        if entries or time.monotonic() >= deadline:
            return entries
        time.sleep(poll_s)
