"""Keep a Triton server's python-backend shared memory private (mode 0600), not world-readable.

The python backend creates one ``/dev/shm`` region per model instance through Boost.Interprocess,
which calls ``fchmod(fd, 0644)`` right after ``shm_open`` — on purpose, to ignore the umask. So a
server started with umask 077 still leaves every request's tensors readable by every local user
(checked: ``Umask: 0077`` in ``/proc/<pid>/status``, regions ``-rw-r--r--``). Changing the mode after
the fact leaves a window in which another user can open the region and keep reading it.

The fix is a 10-line library preloaded into the server (``LD_PRELOAD``) whose ``fchmod`` drops the
group and other bits before calling the real one, so each region is 0600 from its first byte. It is
compiled once with the system C compiler and cached. Without a compiler, :func:`preload_library`
returns None and the server falls back to :func:`make_private` right after start (logged).

::

    env["LD_PRELOAD"] = preload_library()       # before the server starts
    make_private("sonic_triton_1234-5678_0_")    # after: any region still open to others → 0600
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
from pathlib import Path

from .library_cache import build_cached, find_cached, library_cache_folders

log = logging.getLogger(__name__)

#: the built library's file name (in ``<cache>/lib/shm-<hash>-<arch>/``)
LIBRARY_NAME = "libsonic_private_shm.so"

SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/types.h>

/* sonic-hep: shared memory of a Triton server stays private; Boost.Interprocess sets 0644. */
int fchmod(int fd, mode_t mode) {
    static int (*real_fchmod)(int, mode_t) = 0;
    if (!real_fchmod)
        real_fchmod = (int (*)(int, mode_t))dlsym(RTLD_NEXT, "fchmod");
    return real_fchmod(fd, mode & ~(mode_t)(S_IRWXG | S_IRWXO));
}
"""


@functools.cache
def preload_library() -> str | None:
    """Path of the compiled ``fchmod`` library (built on first use), or None without a C compiler."""
    # named after the architecture too: a shared $HOME may serve nodes of other kinds
    key = "shm-" + hashlib.sha256(SOURCE.encode()).hexdigest()[:12] + "-" + platform.machine()
    folders = library_cache_folders("lib")
    found = find_cached(folders, key, LIBRARY_NAME)
    if found is not None:
        return str(found)
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is not None:
        def make(partial: Path) -> None:
            # the source on standard input: nothing but the library is written beside it
            subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(partial), "-x", "c", "-", "-ldl"],
                           input=SOURCE.encode(), check=True, capture_output=True, timeout=120)

        try:
            # "*shm-*": the builds of this layout and those of the older one (lib/libsonic_private_shm-<hash>.so)
            return str(build_cached(folders, key, LIBRARY_NAME, "*shm-*", make))
        except (OSError, subprocess.SubprocessError) as err:
            log.debug("could not build %s: %s", LIBRARY_NAME, err)
    log.warning("no C compiler to build the library that keeps Triton's shared memory private; "
                "its regions are made 0600 only after the server started (set CC or install gcc)")
    return None


def make_private(prefix: str, folder: str | os.PathLike = "/dev/shm") -> list[str]:
    """Sets every region named ``prefix*`` that others may read to 0600; returns the names changed."""
    changed = []
    for path in Path(folder).glob(prefix + "*"):
        try:
            if path.stat().st_mode & 0o077:
                path.chmod(0o600)
                changed.append(path.name)
        except OSError:
            continue
    return changed
