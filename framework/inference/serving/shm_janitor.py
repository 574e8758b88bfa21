"""A server frees the shared memory of clients that died: their regions are unregistered, which unmaps them.

A client registers its regions with a server once and unregisters them when it closes (``shm.py``). A
client killed before that (``kill -9``, the batch system's end of a job) cannot: Triton keeps the regions
registered and mapped until it stops, so a shared server grows by every killed job's regions. Their names
are gone from ``/dev/shm`` by then (the dead client's resource tracker, or the next client's sweep,
removed them), so nothing but the server itself shows the memory held.

:class:`ShmJanitor` runs beside each server the project starts (``server.py``): every ``interval_s`` it
lists the registered system shared memory regions (Triton's HTTP API, on loopback) and unregisters those
whose owner is gone, one log line per owner. A region is judged by its name (``shm.py``:
``sonic_<pid>-<start>_p<pid namespace>_...``, the owner's :class:`~.owner.ProcessId` tag):

* its key no longer exists in the server's ``/dev/shm`` (seen through ``/proc/<server>/root``, so a
  server with a ``/dev/shm`` of its own is judged by its own): a living client removes a region's key only
  after unregistering it, so the region is abandoned;
* its owner's process is dead, judged only when the owner's PID namespace is the janitor's (elsewhere a
  PID means another process, or none).

Regions of other names (other tools' clients) are never touched: nothing says who owns them.

::

    janitor = ShmJanitor(server.http_url, server.pid, interval_s=5, label=server.grpc_url).start()
    ...
    janitor.stop()
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..owner import pid_namespace, tag_alive
from ..shm import CLIENT_REGION_PATTERN

log = logging.getLogger(__name__)

#: how often a server's regions are checked (seconds)
INTERVAL_S = 5.0
_REGION = re.compile(CLIENT_REGION_PATTERN)


@dataclass(frozen=True)
class Registered:
    """One region as the server lists it."""

    name: str
    key: str
    byte_size: int


def abandoned(name: str, key_exists: bool | None, namespace: int = 0) -> str:
    """Why a registered region is abandoned ("" when it is not, or when it is not ours to judge).

    Args:
        name (str): the region's name.
        key_exists (bool | None): whether its key is in the server's ``/dev/shm`` (None: cannot be seen).
        namespace (int): the judge's PID namespace (``owner.pid_namespace``; 0: unknown).
    """
    match = _REGION.match(name)
    if not match:
        return ""
    if key_exists is False:
        return "its shared memory was removed"
    if namespace and match["namespace"] == str(namespace) and not tag_alive(match["tag"]):
        return "its process is gone"
    return ""


class ShmJanitor:
    """Unregisters, every ``interval_s``, the regions of a server whose clients are gone.

    Args:
        http_url (str): the server's HTTP endpoint, ``host:port``.
        server_pid (int | None): the server's process, whose view of ``/dev/shm`` decides whether a key exists.
        interval_s (float): seconds between checks.
        label (str): the server as its log lines name it (default: ``http_url``).
    """

    def __init__(self, http_url: str, server_pid: int | None, interval_s: float = INTERVAL_S, label: str = ""):
        self.http_url = http_url
        self.label = label or http_url
        self.server_pid = server_pid
        self.interval_s = interval_s
        self.freed_regions = 0
        self.freed_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ShmJanitor:
        self._thread = threading.Thread(target=self._run, name=f"sonic-shm-janitor-{self.http_url}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ends the thread (at once: it only waits between checks, and a check is short)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sweep()
            except (OSError, ValueError) as err:  # the server starting, stopping or busy: next time
                log.debug("shared memory janitor of %s: %s", self.http_url, err)
            except Exception:  # noqa: BLE001 - this thread must outlive any surprise
                log.exception("shared memory janitor of %s", self.http_url)

    def sweep(self) -> dict[str, list[str]]:
        """One check: unregisters abandoned regions; returns ``{owner tag: [region names]}`` freed."""
        namespace = pid_namespace()
        freed: dict[str, list[Registered]] = {}
        reasons: dict[str, str] = {}
        for region in self.regions():
            reason = abandoned(region.name, self._key_exists(region.key), namespace)
            if reason and self._unregister(region.name):
                owner = _REGION.match(region.name)["tag"]
                freed.setdefault(owner, []).append(region)
                reasons[owner] = reason
        for owner, regions in freed.items():
            size = sum(r.byte_size for r in regions)
            self.freed_regions += len(regions)
            self.freed_bytes += size
            log.info("freed %d shared memory regions (%.1f MB) that client pid %s registered with the server %s: "
                     "%s", len(regions), size / 1e6, owner.partition("-")[0], self.label, reasons[owner])
        return {owner: [r.name for r in regions] for owner, regions in freed.items()}

    def regions(self) -> list[Registered]:
        """The system shared memory regions the server has registered."""
        with urllib.request.urlopen(f"http://{self.http_url}/v2/systemsharedmemory/status", timeout=5) as answer:
            listed = json.loads(answer.read() or b"[]")
        return [Registered(str(r["name"]), str(r.get("key", "")), int(r.get("byte_size", 0))) for r in listed]

    def _unregister(self, name: str) -> bool:
        url = f"http://{self.http_url}/v2/systemsharedmemory/region/{urllib.parse.quote(name, safe='')}/unregister"
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=5):
                return True
        except (urllib.error.URLError, OSError) as err:  # in use by a request still running: next time
            log.debug("could not unregister %s from %s: %s", name, self.http_url, err)
            return False

    def _key_exists(self, key: str) -> bool | None:
        """Whether ``key`` is in the server's ``/dev/shm`` (None when that cannot be seen)."""
        folder = Path(f"/proc/{self.server_pid}/root/dev/shm") if self.server_pid else Path("/dev/shm")
        try:
            if not os.access(folder, os.X_OK):
                return None
            return (folder / key.lstrip("/")).exists()
        except OSError:
            return None

    def statistics(self) -> dict[str, int]:
        return {"freed_regions": self.freed_regions, "freed_bytes": self.freed_bytes}
