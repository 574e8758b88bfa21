"""Start child processes that die with the job, whatever kills it and whichever thread asks.

Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``) is tied to the *thread* that forked the
child, not to the process: a server forked by a short-lived thread (the ``sonic-recovery`` thread that
starts a fallback server) would be signalled when that thread ends, and a server forked without the
signal (as was done off the main thread) outlives a ``kill -9`` of the job, listening with PPID 1.

So every server is forked by one dedicated daemon thread that lives as long as the process (a thread
of a process only ends when the process does), and the child, before ``exec``:

* asks for SIGTERM when that thread dies (Triton then stops its python stubs and frees their memory);
* checks ``getppid()`` afterwards: a parent that died between ``fork`` and ``prctl`` would never send
  the signal, so the child exits instead of running as an orphan;
* optionally pins itself to CPU cores (inherited by every thread and stub of the server).

::

    process = spawn(["tritonserver", ...], cpus=[2, 3], umask=0o077, stdout=log, ...)
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, resolved once here: the child after ``fork`` must not load libraries."""
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def _child_setup(parent: int, cpus: list[int] | None) -> None:
    """Runs in the forked child before ``exec``: only calls that take no lock another thread may hold."""
    if _PRCTL is not None and _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM)) == 0 and os.getppid() != parent:
        os._exit(1)  # the job died before the signal was armed: do not start an orphan
    if cpus is not None:
        os.sched_setaffinity(0, cpus)


class _Spawner:
    """The one thread that forks (per process: a forked job gets its own on first use)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue | None = None
        self._thread: threading.Thread | None = None
        self._owner_pid = 0

    def _requests(self) -> queue.SimpleQueue:
        with self._lock:
            if self._queue is None or self._owner_pid != os.getpid() or not self._thread.is_alive():
                self._queue = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._serve, args=(self._queue,), daemon=True,
                                                name="sonic-server-spawner")
                self._thread.start()
                self._owner_pid = os.getpid()
            return self._queue

    @staticmethod
    def _serve(requests: queue.SimpleQueue) -> None:
        while True:
            future, args, kwargs = requests.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(subprocess.Popen(args, **kwargs))
            except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
                future.set_exception(err)

    def popen(self, args: list[str], **kwargs: Any) -> subprocess.Popen:
        if threading.current_thread() is self._thread and self._owner_pid == os.getpid():
            return subprocess.Popen(args, **kwargs)
        future: Future = Future()
        self._requests().put((future, args, kwargs))
        return future.result()


_SPAWNER = _Spawner()


def spawn(args: list[str], *, cpus: Iterable[int] | None = None, **popen_kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(args, **popen_kwargs)`` whose process gets SIGTERM when this process dies.

    Args:
        args (list[str]): the command.
        cpus (Iterable[int] | None): cores the child (and everything it starts) may run on.
        popen_kwargs: passed to :class:`subprocess.Popen` (``preexec_fn`` is ours).
    """
    cpu_list = sorted(cpus) if cpus is not None else None
    parent = os.getpid()
    return _SPAWNER.popen(args, preexec_fn=lambda: _child_setup(parent, cpu_list), **popen_kwargs)
