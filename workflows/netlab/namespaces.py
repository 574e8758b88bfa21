"""Network namespaces and a veth pair between them, made and removed with iproute2's ``ip``.

The lab's two namespaces are named ``sonic-lab-<pid>-<start>-<n>-server`` and ``...-jobs``: the creating
process's :class:`ProcessId` tag (PID and kernel start time) is in the name, so a later lab finds the ones a
killed run left and removes them (:func:`sweep_leftovers`) without touching a living run's. Each holds one end
of a veth pair called ``lab0`` (interface names are per namespace) and its own loopback; the addresses exist
only inside them, so nothing on the host's own interfaces, routes or firewall changes.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time

from ...framework.errors import SonicError
from ...framework.inference import ProcessId

PREFIX = "sonic-lab"
DEVICE = "lab0"
SIDES = ("server", "jobs")
#: ``sonic-lab-<pid>-<start>-<n>-<side>``
NAME = re.compile(rf"^{PREFIX}-(?P<pid>\d+)-(?P<start>\d+)-(?P<n>\d+)-(?P<side>{'|'.join(SIDES)})$")


class LabRefused(SonicError):
    """This machine (or user) cannot make network namespaces; the message says why, in one line."""


def ip(*args: str, namespace: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """``ip [-n NAMESPACE] ARGS``; a failure raises SonicError with ip's own message (one line)."""
    command = ["ip", *(["-n", namespace] if namespace else []), *args]
    return run(command, check=check)


def run(command: list[str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        problem = (result.stderr.strip() or result.stdout.strip() or f"exit {result.returncode}").splitlines()[0]
        raise SonicError(f"network lab: `{' '.join(command)}` failed: {problem}")
    return result


def in_namespace(namespace: str, command: list[str]) -> list[str]:
    """``command`` run inside ``namespace``."""
    return ["ip", "netns", "exec", namespace, *command]


def refusal() -> str | None:
    """Why the lab cannot run here (one line), or None when it can: root (or the capability to make
    namespaces) and iproute2's ``ip`` and ``tc``."""
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"network lab: {' and '.join(missing)} not found (install iproute2)"
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return f"network lab: making network namespaces needs root; this process runs as uid {os.geteuid()}"
    return None


def names() -> list[str]:
    """Every network namespace ``ip netns`` knows."""
    listed = ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


def pids(namespace: str) -> list[int]:
    """Processes whose network namespace is ``namespace``."""
    found = ip("netns", "pids", namespace, check=False).stdout.split()
    return [int(pid) for pid in found if pid.isdigit()]


def remove(namespace: str, grace_s: float = 10.0) -> None:
    """Ends every process left in ``namespace`` (SIGTERM, SIGKILL after ``grace_s``) and deletes it; its
    veth end goes with it, and so does the peer's. Missing namespaces are fine."""
    left = pids(namespace)
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in left:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = [pid for pid in pids(namespace) if ProcessId.of(pid) is not None]  # zombies do not count
        if not left:
            break
    ip("netns", "delete", namespace, check=False)


def sweep_leftovers() -> list[str]:
    """Removes the lab namespaces whose creating process is gone (a run killed before it could clean up);
    returns their names."""
    swept = []
    for name in names():
        found = NAME.match(name)
        if found and not ProcessId(int(found["pid"]), int(found["start"])).alive(same_command=False):
            remove(name, grace_s=2.0)
            swept.append(name)
    return swept


def create_pair(tag: str, server_address: str, jobs_address: str, prefix_length: int = 30) -> dict[str, str]:
    """Two namespaces joined by a veth pair, each end addressed and up (loopbacks too); returns
    ``{"server": name, "jobs": name}``. Half-made pairs are removed before the error is raised."""
    made = {side: f"{PREFIX}-{tag}-{side}" for side in SIDES}
    try:
        for name in made.values():
            ip("netns", "add", name)
        ip("link", "add", DEVICE, "netns", made["server"], "type", "veth", "peer", "name", DEVICE, "netns", made["jobs"])
        for side, address in (("server", server_address), ("jobs", jobs_address)):
            ip("addr", "add", f"{address}/{prefix_length}", "dev", DEVICE, namespace=made[side])
            ip("link", "set", "lo", "up", namespace=made[side])
            ip("link", "set", DEVICE, "up", namespace=made[side])
    except BaseException:
        for name in made.values():
            if name in names():
                remove(name, grace_s=1.0)
        raise
    return made
