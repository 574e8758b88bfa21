"""Which model versions the jobs of a fleet use: one record per job, so that a fleet unloads an old version
only when no job uses it any more.

A job that follows a fleet (``services.inference.fleet``) owns ``<fleet>/users/<host>-<pid>-<start>.json``::

    {"host": "wn042", "pid": 5150, "start": 81234567, "heartbeat": 1764170042.5, "ttl_s": 20.0,
     "models": {"demo_mlp": "md5:3c41..."}}

``models`` holds, per model, the digest of the files of the job's version of it relative to the version folder
(``model_digest.version_digest``: the same whatever number a server gives the version). The record is written
when the job decides on a version, *before* its first request of it (``sonic/version_pins.py``), rewritten
every heartbeat of the fleet (``heartbeat_s`` of ``fleet.json``) and removed when the job ends. It is
written whole or not at all, as the servers' entries are (``fleet_directory``).

A reader (a server job deciding whether it may unload a version: ``workflows/grid/fleet_rollout.py``, and
``sonic fleet status``) ignores a record whose heartbeat is older than its ``ttl_s``, or whose process is gone
when it runs on the reader's host: the project's one liveness rule (:class:`~.owner.ProcessId`), as for the
servers' entries. A file of the wrong shape is skipped with a warning and counts as no use.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...atomic import remove_stale_temporaries, write_atomically
from ..owner import ProcessId
from .fleet_directory import FLEET_FILE, HEARTBEAT_S, TTL_S

log = logging.getLogger(__name__)

USERS = "users"


@dataclass
class Use:
    """One job's record (see the module docstring)."""

    host: str
    pid: int
    start: int | None
    heartbeat: float
    ttl_s: float
    models: dict[str, str] = field(default_factory=dict)

    def expired(self, now: float | None = None) -> str:
        """Why a reader must ignore this record now ("" while the job lives)."""
        now = time.time() if now is None else now
        if now - self.heartbeat > self.ttl_s:
            return f"no heartbeat for {now - self.heartbeat:.0f} s (limit {self.ttl_s:.0f} s)"
        if self.host == socket.gethostname():
            process = ProcessId.of(self.pid)
            if process is None or self.start not in (None, process.start):
                return f"its process {self.pid} on {self.host} is gone"
        return ""


def users_dir(fleet: str | os.PathLike) -> Path:
    return Path(fleet) / USERS


def fleet_timing(fleet: str | os.PathLike) -> tuple[float, float]:
    """``(heartbeat_s, ttl_s)`` of the fleet (``fleet.json``; the defaults when it does not say)."""
    try:
        settings = json.loads((Path(fleet) / FLEET_FILE).read_text())
    except (OSError, ValueError):
        settings = {}
    return float(settings.get("heartbeat_s", HEARTBEAT_S)), float(settings.get("ttl_s", TTL_S))


def parse_use(text: str) -> Use:
    """The record a file holds, checked; ValueError naming what is wrong."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    use = Use(**{k: data[k] for k in ("host", "pid", "start", "heartbeat", "ttl_s", "models") if k in data})
    wrong = [name for name, ok in (("host", isinstance(use.host, str)), ("pid", isinstance(use.pid, int)),
                                   ("start", use.start is None or isinstance(use.start, int)),
                                   ("heartbeat", isinstance(use.heartbeat, (int, float))),
                                   ("ttl_s", isinstance(use.ttl_s, (int, float)) and use.ttl_s > 0),
                                   ("models", isinstance(use.models, dict) and all(
                                       isinstance(k, str) and isinstance(v, str) for k, v in use.models.items())))
             if not ok]
    if wrong:
        raise ValueError(f"field {wrong[0]!r} is of the wrong type")
    return use


_warned: set[tuple[str, str]] = set()


def live_uses(fleet: str | os.PathLike, now: float | None = None) -> list[Use]:
    """The records of the jobs that use the fleet now (a bad file is skipped, with a warning once)."""
    uses = []
    for path in sorted(users_dir(fleet).glob("*.json")):
        try:
            use = parse_use(path.read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError, TypeError) as err:
            if (str(path), str(err)) not in _warned:
                _warned.add((str(path), str(err)))
                log.warning("job record %s skipped: %s", path, err)
            continue
        if not use.expired(now):
            uses.append(use)
    return uses


def jobs_per_version(fleet: str | os.PathLike, now: float | None = None) -> dict[str, Counter[str]]:
    """``{model: {content digest: live jobs using it}}``."""
    out: dict[str, Counter[str]] = {}
    for use in live_uses(fleet, now):
        for model, content in use.models.items():
            out.setdefault(model, Counter())[content] += 1
    return out


class FleetUse:
    """The job side: keeps this job's record while it runs (a listener of ``VersionPins``).

    Args:
        fleet: the fleet directory.
    """

    def __init__(self, fleet: str | os.PathLike):
        self.heartbeat_s, self.ttl_s = fleet_timing(fleet)
        self.me = ProcessId.current()
        self.host = socket.gethostname()
        self.path = users_dir(fleet) / f"{self.host}-{self.me.tag}.json"
        self._used: dict[str, str] = {}
        self._lock = threading.Lock()  # one writer at a time: the temporary file is named after this process
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = ""

    def changed(self, used: dict[str, str]) -> None:
        """The job decided on one more version: recorded now, then every heartbeat until :meth:`close`."""
        with self._lock:
            self._used = dict(used)
            self._write()
            if self._thread is None:
                self._thread = threading.Thread(target=self._beat, name="sonic-fleet-use", daemon=True)
                self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            with self._lock:
                if not self._stop.is_set():
                    self._write()

    def _write(self) -> None:
        text = json.dumps(asdict(Use(self.host, self.me.pid, self.me.start, time.time(), self.ttl_s, self._used)))
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path, lambda temporary: Path(temporary).write_text(text + "\n"))
            self._failing = ""
        except OSError as err:  # the job goes on; the fleet keeps what it saw for one TTL
            if str(err) != self._failing:
                self._failing = str(err)
                log.warning("cannot record this job's model versions in %s (%s): the fleet may unload a version "
                            "this job uses once its last record is %.0f s old", self.path.parent, err, self.ttl_s)

    def close(self) -> None:
        """The job ended: the record goes (the fleet may unload versions nobody else uses)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            self.path.unlink(missing_ok=True)
            remove_stale_temporaries(str(self.path))
