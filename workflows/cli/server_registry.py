"""The registry of servers that ``sonic server start`` runs on this machine, kept apart from the command so
that its format and its liveness rule can be read (and reused) without the start/stop/status code.

One record per server, ``$SONIC_HEP_STATE/<host>_<port>.json`` (default ``~/.cache/sonic-hep/servers``)::

    {"grpc": "127.0.0.1:40123", "models": ["demo_sum"], "pid": 4242, ...,      # what `status` shows
     "supervisor": {"pid": 4240, "start": 81234567, "cmdline": ["sonic", "server", "start", ...]},
     "entry": {"name": "127.0.0.1_40123", "address": "127.0.0.1:40123", "host": "node7", "pid": 4240,
               "start": 81234567, "heartbeat": 1764170042.5, "ttl_s": 20.0, ...}}

* ``entry`` is a fleet directory entry (:mod:`~sonic_hep.framework.inference.serving.fleet_directory`), checked by
  its parser and judged by its one liveness rule (:meth:`Entry.expired`: a heartbeat within ``ttl_s`` and,
  on its own host, the ``sonic server start`` process still running with the same kernel start time).
  The top level keeps the server's own description (its tritonserver ``pid``, models, backends, log).
* **Written whole** through :mod:`~sonic_hep.framework.atomic` and rewritten every
  :data:`~sonic_hep.framework.inference.serving.fleet_directory.HEARTBEAT_S` by the supervising process; removed
  when the server stops.
* Records written on another host (a home folder shared between nodes) are not this machine's: they are
  neither listed, judged by this machine's processes, nor removed here.
* A stale record (its supervisor gone, or its PID now another process's) is never signalled: ``stop``
  also compares the command line (:meth:`ProcessId.alive`) right before it sends SIGTERM.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...framework.atomic import write_atomically
from ...framework.inference.serving import EntryProblem, Entry, entry_from
from ...framework.inference import ProcessId

if TYPE_CHECKING:
    from ...framework.inference.serving import TritonServer


def state_dir() -> Path:
    """Where the records live: ``$SONIC_HEP_STATE``, else ``~/.cache/sonic-hep/servers``."""
    return Path(os.environ.get("SONIC_HEP_STATE", Path.home() / ".cache" / "sonic-hep" / "servers"))


def record_name(grpc_url: str) -> str:
    return grpc_url.replace(":", "_").replace("/", "_")


def record_path(grpc_url: str) -> Path:
    return state_dir() / (record_name(grpc_url) + ".json")


class Registration:
    """The record of one running server, written at start and on every :meth:`beat` by its supervisor."""

    def __init__(self, server: TritonServer):
        self.path = record_path(server.grpc_url)
        supervisor = ProcessId.current()
        server_process = ProcessId.of(server.pid)
        self.entry = Entry(name=record_name(server.grpc_url), address=server.grpc_url,
                           models={name: "" for name in server.served}, ssl=bool(server.tls["cert"]),
                           pid=supervisor.pid, start=supervisor.start)
        self.description = {**server.describe(), "supervisor": supervisor.to_dict(),
                            "server": server_process.to_dict() if server_process else None,
                            "started": time.time()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.beat()

    def beat(self) -> None:
        """Rewrites the record with a fresh heartbeat (whole: a reader never sees half of one)."""
        self.entry.heartbeat = time.time()
        text = json.dumps({**self.description, "entry": asdict(self.entry)})
        write_atomically(self.path, lambda temporary: Path(temporary).write_text(text))

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _judged(record: dict[str, Any]) -> tuple[Entry | None, str]:
    """The record's entry and why it is stale ("" while it runs); None for a record with no valid entry
    (written by an older version, or damaged: stale, and nothing in it may be signalled)."""
    try:
        entry = entry_from(record.get("entry"))
    except EntryProblem as err:
        return None, f"not a record of this version ({err})"
    return entry, entry.expired()


def supervisor_of(record: dict[str, Any]) -> ProcessId | None:
    """The ``sonic server start`` process a record names, or None for a record that names none."""
    try:
        return ProcessId.from_dict(record["supervisor"])
    except (KeyError, TypeError, ValueError):
        return None


def read_records(remove_stale: bool = True) -> tuple[list[dict], list[dict]]:
    """``(running, stale)`` records of servers started by ``sonic server start`` on this machine.

    A record runs while its entry is not expired (:meth:`Entry.expired`); stale records are removed unless
    ``remove_stale`` is false. Each record carries ``_path`` and, when stale, ``_why``.
    """
    running, stale = [], []
    here = socket.gethostname()
    for path in sorted(state_dir().glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except FileNotFoundError:  # its server stopped meanwhile
            continue
        except (OSError, ValueError):
            record = {}
        record = record if isinstance(record, dict) else {}
        record["_path"] = str(path)
        entry, why = _judged(record)
        if entry is not None and entry.host != here:
            continue  # another node's (a shared home folder): only its own supervisor may judge it
        if not why:
            running.append(record)
            continue
        record["_why"] = why
        if remove_stale:
            path.unlink(missing_ok=True)
        stale.append(record)
    return running, stale


def running_records() -> list[dict]:
    """Servers started by ``sonic server start`` on this machine that are still running."""
    return read_records()[0]


def stale_line(record: dict) -> str:
    """One line for a stale record: where it is, what it named, why it is stale, that nothing was signalled."""
    pid = (record.get("supervisor") or {}).get("pid", record.get("supervisor_pid", "?"))
    why = record.get("_why") or f"pid {pid} is no longer the `sonic server start` that wrote it"
    return (f"sonic: stale record {record['_path']} ({record.get('grpc', 'no address')}): {why}; "
            f"removed the record and signalled nothing")
