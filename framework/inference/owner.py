"""Which process owns a server, a work folder or a shared-memory region — proven, not guessed from a PID.

A PID alone names whatever process holds that number *now*: after the owner died the number may be
reused, and signalling or cleaning "by PID" then hits a stranger. A :class:`ProcessId` adds the start
time the kernel records (``/proc/<pid>/stat`` field 22, clock ticks since boot) and the command line,
so a record can be checked before anything is signalled or deleted::

    me = ProcessId.current()
    record = me.to_dict()                      # stored beside what the process owns
    ProcessId.from_dict(record).alive()        # False once it exited, even if the PID was reused

Names of things a process leaves in shared places (``/dev/shm``, the temp folder) carry
:meth:`ProcessId.tag` (``<pid>-<start>``), so that :func:`sweep_shared_memory` can remove the litter of
dead processes after a ``kill -9`` without touching a living process's regions.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (which may hold spaces and parentheses)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()
    except OSError:
        return None


def _cmdline(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return [part.decode(errors="replace") for part in handle.read().split(b"\0") if part]
    except OSError:
        return None


@dataclass(frozen=True)
class ProcessId:
    """A process named by PID, kernel start time and command line.

    Attributes:
        pid (int): the process ID.
        start (int): start time in clock ticks since boot (``/proc/<pid>/stat`` field 22).
        cmdline (tuple[str, ...]): its arguments, for messages and as a second check.
    """

    pid: int
    start: int
    cmdline: tuple[str, ...] = ()

    @classmethod
    def of(cls, pid: int) -> ProcessId | None:
        """The process running as ``pid`` now, or None when there is none (or only a zombie)."""
        fields = _stat_fields(pid)
        if not fields or fields[0] in ("Z", "X"):
            return None
        return cls(pid, int(fields[19]), tuple(_cmdline(pid) or ()))

    @classmethod
    def current(cls) -> ProcessId:
        found = cls.of(os.getpid())
        assert found is not None
        return found

    @property
    def tag(self) -> str:
        """``<pid>-<start>``: unique among every process this machine ran since boot."""
        return f"{self.pid}-{self.start}"

    def alive(self, same_command: bool = True) -> bool:
        """True while this very process runs (not a zombie, not a later process given the same PID).

        Args:
            same_command (bool): also require the same command line (before signalling a process);
                PID and start time alone already identify it (enough before removing its litter,
                and right for a process that may rename itself).
        """
        now = ProcessId.of(self.pid)
        if now is None or now.start != self.start:
            return False
        return not same_command or not self.cmdline or now.cmdline == self.cmdline

    def to_dict(self) -> dict:
        return {"pid": self.pid, "start": self.start, "cmdline": list(self.cmdline)}

    @classmethod
    def from_dict(cls, data: dict) -> ProcessId:
        """Raises KeyError/TypeError/ValueError on a record that is not one."""
        return cls(int(data["pid"]), int(data["start"]), tuple(str(a) for a in data.get("cmdline", ())))

    def describe(self) -> str:
        command = " ".join(self.cmdline)
        return f"pid {self.pid} ({command[:80]})" if command else f"pid {self.pid}"


@functools.cache
def pid_namespace() -> int:
    """This process's PID namespace (the inode of ``/proc/self/ns/pid``), 0 when it cannot be read.

    A tag's PID means something only in the namespace it was taken in: a process in a container that shares
    ``/dev/shm`` with the host but not its PIDs would look dead from the host. Records that others judge by
    their tag carry this number too, so that only a judge in the same namespace trusts the PID.
    """
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def tag_alive(tag: str) -> bool:
    """Whether the process of a ``<pid>-<start>`` tag still runs (start time compared, command line not)."""
    pid, _, start = tag.partition("-")
    try:
        now = ProcessId.of(int(pid))
        return now is not None and now.start == int(start)
    except ValueError:
        return True  # not a tag of ours: never treat it as litter


def sweep_shared_memory(pattern: str) -> list[str]:
    """Unlinks ``/dev/shm`` entries of dead owners and returns their names.

    Args:
        pattern (str): a regular expression matched against each name from its start, whose group
            ``tag`` is the owner's :attr:`ProcessId.tag`; only files of this user are considered. A name
            whose group ``namespace`` (when the pattern has one) names another PID namespace is left alone.
    """
    regex = re.compile(pattern)
    here = str(pid_namespace())
    removed = []
    try:
        entries = list(SHM_DIR.iterdir())
    except OSError:
        return removed
    for path in entries:
        match = regex.match(path.name)
        if not match or match.groupdict().get("namespace") not in (None, here) or tag_alive(match.group("tag")):
            continue
        try:
            if path.stat().st_uid != os.getuid():
                continue
            path.unlink()
            removed.append(path.name)
        except OSError:
            continue
    if removed:
        log.info("removed %d shared memory regions of processes that died: %s", len(removed), removed[:5])
    return removed
