"""A fleet's directory of servers on a shared filesystem: who serves what, where, and whether it still lives.

Each server of a fleet (a batch job running ``tritonserver``) owns one entry, ``<fleet>/servers/<name>.json``::

    {"name": "0003", "address": "gpu17.site:40123", "models": {"demo_mlp": "1"}, "health": "ready",
     "ssl": false, "root_certificates": null, "host": "gpu17", "pid": 4242, "batch_id": "1234_3",
     "started": 1764170000.0, "heartbeat": 1764170042.5, "ttl_s": 20.0, "start": 81234567}

* **Written whole or not at all**: each write goes to a temporary named after the writer's host and pid and
  is renamed over the entry (:class:`~sonic_hep.framework.atomic.PendingText`), so a reader on any node sees
  the previous or the next entry, never a part, whatever number of servers write at once (each writes only
  its own entry).
* **Expiry**: the server rewrites its entry every heartbeat; a reader ignores an entry whose ``heartbeat``
  is older than its ``ttl_s`` (a server job killed with SIGKILL, or a node that died, cannot remove its
  entry). On the reader's own host the writer's process decides at once, by the project's one liveness
  rule (:class:`~.owner.ProcessId`: the ``pid`` must still run and, where the entry gives it, have the kernel
  ``start`` time it had, so a PID reused by another process does not keep a dead server's entry alive).
  Clocks of the nodes are assumed NTP-synchronised to well within ``ttl_s``.
* **Removal**: a server job that ends (stopped, cancelled, its server died) removes its entry first, so
  clients stop choosing it before it stops answering.

* **Checked on reading, in one place** (:func:`parse_entry`): a file of the wrong shape (not JSON, not an
  object, a field missing or of the wrong type, an address that is not ``HOST:PORT``) is skipped with a
  warning naming the file and the field, and the good entries beside it are used: one bad file must not stop
  every client of the fleet. ``sonic fleet status`` lists such files with their problem (:func:`scan`).

Readers (the SONIC client's :class:`~.servers.ServerPool`, ``sonic fleet status``, the autoscaler) call
:func:`live_entries` or :func:`discover`; nothing here talks to a server.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...atomic import PendingText, remove_stale_temporaries
from ..owner import ProcessId
from ..server_spec import ServerSpec

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
    #: kernel start time of ``pid`` (:attr:`ProcessId.start`); filled in for an entry of this process
    start: int | None = None
    #: the cards the server uses (its CUDA_VISIBLE_DEVICES; ``gpu_placement.py``), None for a CPU server or every card
    gpus: list[str] | None = None
    #: per model, the versions the server serves and the digest of each one's files (``model_digest.version_digest``):
    #: several while the fleet rolls a new version in (``fleet_rollout``)
    versions: dict[str, dict[str, str]] = field(default_factory=dict)
    #: per model, why the server could not serve the versions the fleet asked for (it serves what it served)
    version_errors: dict[str, str] = field(default_factory=dict)
    #: ``HOST:PORT`` of the server's Prometheus metrics (``/metrics``), for the fleet's scrape targets
    #: (``fleet_prometheus``); None when the entry's writer did not say
    metrics: str | None = None

    def __post_init__(self) -> None:
        if self.start is None and self.pid == os.getpid():
            self.start = ProcessId.current().start

    def process_alive(self) -> bool:
        """Whether the writer still runs (meaningful on its own host only): its PID is taken, and by a
        process started when the entry says (an entry without ``start`` trusts the PID)."""
        now = ProcessId.of(self.pid)
        return now is not None and self.start in (None, now.start)

    def expired(self, now: float | None = None) -> str:
        """Why a reader must ignore this entry now ("" while it is live)."""
        now = time.time() if now is None else now
        if now - self.heartbeat > self.ttl_s:
            return f"no heartbeat for {now - self.heartbeat:.0f} s (limit {self.ttl_s:.0f} s)"
        if self.host == socket.gethostname() and not self.process_alive():
            return f"its process {self.pid} on {self.host} is gone"
        if self.health != "ready":
            return f"health {self.health}"
        return ""

    def spec(self, credentials: dict[str, Any] | None = None) -> ServerSpec:
        """How a client connects: the entry's address and TLS mode, with the client's own certificate
        (``private_key``, ``certificate_chain``) and, if given, its own ``root_certificates``."""
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


class EntryProblem(ValueError):
    """Why a file is not a usable entry: one line naming the field (or "not JSON", "not an object")."""


@dataclass(frozen=True)
class BadEntry:
    """A file in ``servers/`` that readers skip, and why (``sonic fleet status`` lists them)."""

    path: Path
    problem: str


#: every field of an entry: the types it may hold, what to say when it holds another, and whether a file
#: without it is refused (those that decide where a server is and whether it still lives; the others fall
#: back to :class:`Entry`'s defaults)
FIELDS: dict[str, tuple[tuple[type, ...], str, bool]] = {
    "name": ((str,), "a string", True),
    "address": ((str,), "a string HOST:PORT", True),
    "models": ((dict,), "an object {model: version}", False),
    "health": ((str,), "a string", False),
    "ssl": ((bool,), "true or false", False),
    "root_certificates": ((str, type(None)), "a path or null", False),
    "host": ((str,), "a string", True),
    "pid": ((int,), "an integer", True),
    "batch_id": ((str, type(None)), "a string or null", False),
    "started": ((int, float), "a number", False),
    "heartbeat": ((int, float), "a number", True),
    "ttl_s": ((int, float), "a number", True),
    "start": ((int, type(None)), "an integer or null", False),
    "versions": ((dict,), "an object {model: {version: digest}}", False),
    "version_errors": ((dict,), "an object {model: reason}", False),
    "gpus": ((list, type(None)), "a list of card names or null", False),
    "metrics": ((str, type(None)), "a string HOST:PORT or null", False),
}


def parse_entry(text: str) -> Entry:
    """The entry a file holds, every field checked, so that nothing a reader does with it later can fail.

    Fields this version does not know are ignored (a newer writer may add some).

    Raises:
        EntryProblem: naming the first field that is missing or wrong.
    """
    try:
        data = json.loads(text)
    except ValueError as err:
        raise EntryProblem(f"not JSON ({err})") from None
    return entry_from(data)


def entry_from(data: Any) -> Entry:
    """The entry an already decoded JSON value holds, checked as :func:`parse_entry` checks a file (for a
    record that keeps its entry beside other data: ``sonic server start``'s registry)."""
    if not isinstance(data, dict):
        raise EntryProblem(f"not a JSON object: {_shown(data)}")
    values: dict[str, Any] = {}
    for name, (types, wanted, required) in FIELDS.items():
        if name not in data:
            if required:
                raise EntryProblem(f"field {name!r} is missing")
            continue
        value = data[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise EntryProblem(f"field {name!r} must be {wanted}, not {_shown(value)}")
        values[name] = float(value) if float in types and value is not None else value
    for name in ("started", "heartbeat", "ttl_s"):
        if name in values and not math.isfinite(values[name]):
            raise EntryProblem(f"field {name!r} must be a finite number, not {_shown(data[name])}")
    if values["ttl_s"] <= 0:
        raise EntryProblem(f"field 'ttl_s' must be positive, not {_shown(data['ttl_s'])}")
    if values["pid"] <= 0:
        raise EntryProblem(f"field 'pid' must be positive, not {values['pid']}")
    host, sep, port = values["address"].rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise EntryProblem(f"field 'address' must be HOST:PORT with a port 1-65535, not {_shown(values['address'])}")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in values.get("models", {}).items()):
        raise EntryProblem(f"field 'models' must map model names to version strings, not {_shown(data['models'])}")
    if not all(isinstance(card, str) for card in values.get("gpus") or []):
        raise EntryProblem(f"field 'gpus' must list card names as strings, not {_shown(data['gpus'])}")
    return Entry(**values)


def _shown(value: Any) -> str:
    """A value as JSON, shortened: a message stays one line whatever a file holds."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def scan(fleet: str | os.PathLike) -> tuple[list[Entry], list[BadEntry]]:
    """Every entry in the directory, expired ones included (in name order), and the files that are not
    entries with their problem. A file removed between the listing and the read is neither."""
    entries, bad = [], []
    for path in sorted(servers_dir(fleet).glob("*.json")):
        try:
            entries.append(parse_entry(path.read_text()))
        except FileNotFoundError:
            continue
        except EntryProblem as err:
            bad.append(BadEntry(path, str(err)))
        except (OSError, UnicodeDecodeError) as err:
            bad.append(BadEntry(path, f"not readable ({err})"))
    return entries, bad


#: bad files already warned about by this process (a client re-reads the directory every few seconds)
_warned: set[BadEntry] = set()


def read_entries(fleet: str | os.PathLike) -> list[Entry]:
    """The entries of :func:`scan`; each bad file is skipped with a warning (once per file and problem)."""
    entries, bad = scan(fleet)
    for item in bad:
        if item not in _warned:
            _warned.add(item)
            log.warning("fleet entry %s skipped: %s", item.path, item.problem)
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
