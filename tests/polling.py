"""Real processes in tests: waiting for what they do, bounded in time (a bound, never a timing assertion),
and finding the ones that outlived what should have ended them."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import IO

import psutil

from sonic_hep.framework.inference.owner import ProcessId


def wait_for(condition: Callable[[], object], timeout: float = 60.0, what: str = "condition") -> object:
    """Polls ``condition`` until it returns something true and returns that; fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def read_line(stream: IO[str], timeout: float) -> str:
    """One line from a child's pipe; fails after ``timeout`` s instead of blocking the suite."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not box:
        raise AssertionError(f"no line within {timeout:.0f} s")
    return box[0]


def gone(pid: int) -> bool:
    """True when ``pid`` has exited (a zombie counts: this machine's PID 1 does not reap every child)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def processes_mentioning(text: str) -> list[str]:
    """``"pid: command line"`` of living (non-zombie) processes, this one aside, whose command line contains
    ``text`` (a server's work folder: the server and its python stubs)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        process = ProcessId.of(int(entry))
        command = " ".join(process.cmdline) if process is not None else ""
        if text in command:
            found.append(f"{entry}: {command[:200]}")
    return found
