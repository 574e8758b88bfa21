"""Waiting for something a real process does, bounded in time (a bound, never a timing assertion)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import IO


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
