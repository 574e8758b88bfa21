"""A server's work folder: made per server, recorded with its owners, removed on a clean stop, swept when
its job and server both died, kept (with the reason recorded) when the log is needed.

A ``kill -9`` of a job leaves its servers' folders behind (runtime repository copies, backends, logs:
hundreds of MB per server); the owner record lets the next server on the machine tell such a folder from
one whose job still runs, without a daemon. Folders the user chose are never removed, only emptied of the
runtime copies.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..owner import ProcessId

log = logging.getLogger(__name__)

#: the work folders we create: ``<temp>/sonic-triton-*``, each with an owner record
WORKDIR_PREFIX = "sonic-triton-"
OWNER_FILE = "sonic-owner.json"
KEEP_ENV = "SONIC_HEP_KEEP_WORKDIR"


@dataclass
class WorkFolder:
    """Where one server's files live, and whether we may remove them."""

    path: Path
    owned: bool  # we made it (a temporary folder); the user's folders are never removed
    keep: bool  # kept on request (``keep_workdir`` or ``SONIC_HEP_KEEP_WORKDIR=1``)
    job: ProcessId

    @classmethod
    def make(cls, chosen: str | os.PathLike | None, keep: bool | None) -> WorkFolder:
        """The folder the user chose, or a new temporary one (after sweeping those of dead jobs)."""
        keep = keep if keep is not None else os.environ.get(KEEP_ENV, "") not in ("", "0")
        if chosen is not None:
            return cls(Path(chosen), owned=False, keep=keep, job=ProcessId.current())
        sweep_stale_workdirs()
        folder = cls(Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX)), owned=True, keep=keep, job=ProcessId.current())
        folder.record(server_pid=None)
        return folder

    def record(self, server_pid: int | None, keep: str | None = None) -> None:
        """Records who owns a folder we made (and why it is kept), for :func:`sweep_stale_workdirs`."""
        if not self.owned:
            return
        server = ProcessId.of(server_pid) if server_pid else None
        record = {"job": self.job.to_dict(), "server": server.to_dict() if server else None, "keep": keep}
        try:
            (self.path / OWNER_FILE).write_text(json.dumps(record))
        except OSError:
            pass

    def keep_for(self, reason: str, server_pid: int | None) -> None:
        """Keeps a folder we made, for its log; a kept folder is never swept (the user's are never removed)."""
        if not self.owned:
            return
        self.record(server_pid, keep=reason)
        log.warning("kept the Triton server's work folder %s: %s", self.path, reason)

    def clean(self, clean_stop: bool, server_pid: int | None) -> None:
        """After the server stopped: removed when it stopped cleanly, kept with the reason when not."""
        if not clean_stop:
            self.keep_for("the server did not stop cleanly", server_pid)
        elif self.owned and not self.keep:
            shutil.rmtree(self.path, ignore_errors=True)
        else:  # a folder the user chose, or asked to keep: the log stays, the runtime copies go
            for sub in ("repository", "backends"):
                shutil.rmtree(self.path / sub, ignore_errors=True)
            if self.owned:
                self.record(server_pid, keep="kept on request")


def sweep_stale_workdirs(folder: str | os.PathLike | None = None) -> list[Path]:
    """Removes the work folders of servers whose job and server both died (a ``kill -9`` leaves them).

    Only folders of this user named ``sonic-triton-*`` with an owner record are considered; folders
    kept on purpose (a failed start, ``keep_workdir``) stay until the user removes them.
    """
    removed = []
    for path in Path(folder or tempfile.gettempdir()).glob(WORKDIR_PREFIX + "*"):
        try:
            if path.stat().st_uid != os.getuid():
                continue
            record = json.loads((path / OWNER_FILE).read_text())
            owners = [ProcessId.from_dict(record["job"])]
            if record.get("server"):
                owners.append(ProcessId.from_dict(record["server"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not ours, or not ours to judge
        if record.get("keep") or any(owner.alive(same_command=False) for owner in owners):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    if removed:
        log.info("removed %d work folders of Triton servers whose job died: %s", len(removed),
                 [str(p) for p in removed[:5]])
    return removed
