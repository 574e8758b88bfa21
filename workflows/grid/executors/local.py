"""``local``: jobs as processes on this machine, at most ``--max-running`` at once (default: one per core)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from .driver import DriverExecutor


class LocalExecutor(DriverExecutor):
    """A pool of job processes on this machine, run by a detached driver (see ``driver``)."""

    name = "local"

    @contextlib.contextmanager
    def pool(self, max_running: int) -> Iterator[ThreadPoolExecutor]:
        with ThreadPoolExecutor(max_running, thread_name_prefix="job") as pool:
            yield pool
