"""Files that appear complete or not at all: checked targets, temporary names, stale temporaries.

Every file a job writes (the ROOT output, the timing JSON) is written as
``<target>.tmp-<host>-<pid>-<nanoseconds>`` next to its target and renamed into place only when the job
succeeds, so a failed or killed job never leaves a file that looks complete. Because the name says which
process on which host wrote it, a later job writing the same target can tell a temporary whose writer
is dead (a ``kill -9``, a node that lost power) from one still being written, and remove only the dead
ones: ``pid`` alone is not enough on a shared file system, where another node's live writer has a pid
that means nothing here.

Host and PID are enough here, unlike for signalling a process (where the project's liveness rule,
``inference.owner.ProcessId``, also compares the kernel start time): the sweep removes a temporary only
when no process holds its writer's PID on the writer's host, and a writer that holds its PID is alive.
A PID reused since the writer died can only make the sweep keep a dead writer's temporary until that
PID is free, never remove a live writer's one. The one case a host name cannot tell apart is a writer in
another PID namespace with the same host name (a container on the host's network writing into a folder
the host also writes the same target in); the project's jobs do not share targets that way.

Targets are checked before the first event (:func:`check_target`): an existing directory, a
non-regular file (``/dev/null`` would be replaced by a rename), a missing or unwritable folder, or a
path that is also an input of the job are refused with one line naming the path.

This is the project's one way of writing a file whole, so every temporary has a name the sweeping
recognises: :func:`write_atomically` for files the project keeps for itself (a grid record, a compiled
library, a recording), raising the system's ``OSError`` for the caller to word; :func:`write_text` and
:func:`write_with` for files a user named (checked first, refused with :class:`OutputError`);
:class:`PendingText` for a file created before a job and committed after it; :func:`put_in_place` is the
rename they share (the ROOT writer, :class:`~.tree_writer.TreeWriter`, commits through it too).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Iterable

from .errors import OutputError

log = logging.getLogger(__name__)

_TEMPORARY = re.compile(r"\.tmp-(?P<host>.+)-(?P<pid>\d+)-(?P<ns>\d+)$")


def _host() -> str:
    """This host's name as it goes into a temporary name (no path separators)."""
    return socket.gethostname().replace(os.sep, "_") or "localhost"


def temporary_name(target: str) -> str:
    """The temporary name this process writes ``target`` under."""
    return f"{target}.tmp-{_host()}-{os.getpid()}-{time.monotonic_ns()}"


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one we may not signal counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def writer_of(temporary: str) -> tuple[str, int] | None:
    """(host, pid) encoded in a temporary's name, or None for a name that is not one of ours."""
    match = _TEMPORARY.search(temporary)
    return (match["host"], int(match["pid"])) if match else None


def remove_stale_temporaries(target: str) -> list[str]:
    """Removes ``target``'s temporaries whose writer (a process on this host) is dead; returns them.

    Temporaries written on other hosts, by live processes, or named in another way are left alone.
    """
    removed = []
    host = _host()
    for candidate in glob.glob(glob.escape(target) + ".tmp-*"):
        writer = writer_of(candidate)
        if writer is None or writer[0] != host or writer[1] == os.getpid() or pid_alive(writer[1]):
            continue
        try:
            os.unlink(candidate)
        except FileNotFoundError:  # another job cleaned it meanwhile
            continue
        except OSError as err:
            log.warning("cannot remove the stale temporary %s: %s", candidate, err.strerror)
            continue
        removed.append(candidate)
        log.info("removed %s, left by a job (pid %d) that died", candidate, writer[1])
    return removed


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_target(path: str, what: str, inputs: Iterable[tuple[str, str]] = ()) -> str:
    """Checks that ``path`` can be written as a whole file; returns its absolute path.

    Args:
        path: the target as the user gave it.
        what: how the user named it (``"output file"``, ``"--timing-json"``), for the message.
        inputs: ``(path, description)`` of files the job reads or writes otherwise: the target may be none of them.
    """
    if not path:
        raise OutputError(f"{what}: empty path")
    if path.endswith(os.sep):
        raise OutputError(f"{what} {path!r} names a directory; give a file name")
    absolute = os.path.abspath(path)
    if os.path.isdir(absolute):
        raise OutputError(f"{what} {path!r} is an existing directory; give a file name (e.g. {path.rstrip(os.sep)}/out.root)")
    if os.path.lexists(absolute) and not os.path.isfile(absolute):
        raise OutputError(f"{what} {path!r} exists and is not a regular file; it would be replaced")
    directory = os.path.dirname(absolute)
    if not os.path.isdir(directory):
        raise OutputError(f"{what} {path!r}: folder {directory!r} does not exist")
    for other, description in inputs:
        if "://" not in other and _same_file(absolute, other):
            raise OutputError(f"{what} {path!r} is also {description}; writing it would destroy it")
    return absolute


#: errors of ``link`` on a file system that has no hard links
NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK}


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def put_in_place(temporary: str, target: str, replace: bool = True) -> str:
    """Gives a filled ``temporary`` the name ``target`` once its data is on disk; returns ``target``.

    With ``replace=False`` an existing file is never replaced, even one that appeared while this one was
    written (two writers racing for one name: the second gets ``FileExistsError``, the first's file stays):
    the name is given by a hard link, which the system refuses atomically when the name exists.

    Raises:
        OSError: the system's refusal (a full disk, ``FileExistsError``); the temporary is left to the caller.
    """
    _fsync(temporary)  # the data is on disk before the name says the file is complete
    if not replace:
        try:
            os.link(temporary, target)
        except FileExistsError:
            raise
        except OSError as err:
            if err.errno not in NO_HARD_LINKS:
                raise
            # a file system without hard links (some FUSE mounts): checked, then renamed (not atomic there)
            if os.path.lexists(target):
                raise FileExistsError(errno.EEXIST, "file exists", target) from None
        else:
            os.unlink(temporary)
            return target
    os.replace(temporary, target)
    return target


def write_atomically(path: str | os.PathLike, fill: Callable[[str], object], replace: bool = True) -> str:
    """``fill(temporary)`` writes the file under a temporary name beside ``path``, which :func:`put_in_place`
    then renames; stale temporaries of ``path`` are removed first, and if anything fails nothing is left
    behind. Returns ``path`` as a string.

    Raises:
        OSError: the system's refusal, as it came, for the caller to word (the file's old content stays);
            whatever ``fill`` raises passes through.
    """
    target = os.fspath(path)
    remove_stale_temporaries(target)
    temporary = temporary_name(target)
    try:
        fill(temporary)
        return put_in_place(temporary, target, replace)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


class PendingText:
    """A text file created now under a temporary name (so the folder is proven writable before the job
    runs) and renamed into place by :meth:`commit`; :meth:`abort` removes it.

    Args:
        path: the target (checked with :func:`check_target`).
        what: how the user named it, for messages.
        inputs: see :func:`check_target`.
    """

    def __init__(self, path: str, what: str, inputs: Iterable[tuple[str, str]] = ()):
        self.what = what
        self.path = check_target(path, what, inputs)
        remove_stale_temporaries(self.path)
        self.tmp_path = temporary_name(self.path)
        try:
            with open(self.tmp_path, "x", encoding="utf-8"):
                pass
        except OSError as err:
            raise OutputError(f"cannot write {what} {path!r}: {err.strerror}") from None
        self._written = False

    def write(self, text: str) -> None:
        """Writes the content to the temporary (where a full disk shows), not yet visible."""
        try:
            with open(self.tmp_path, "w", encoding="utf-8") as stream:
                stream.write(text)
                stream.flush()
                os.fsync(stream.fileno())
        except OSError as err:
            raise OutputError(f"cannot write {self.what} {self.path!r}: {err.strerror}") from None
        self._written = True

    def mark_written(self) -> None:
        """Says that another writer (a plotting library given :attr:`tmp_path`) filled the temporary."""
        self._written = True

    def commit(self) -> str:
        """Renames the written temporary into place; returns the path."""
        if not self._written:
            raise OutputError(f"{self.what} {self.path!r}: nothing was written")
        try:
            put_in_place(self.tmp_path, self.path)
        except OSError as err:
            raise OutputError(f"cannot write {self.what} {self.path!r}: {err.strerror}") from None
        return self.path

    def abort(self) -> None:
        """Removes the temporary (a failed job leaves nothing that looks complete)."""
        try:
            os.unlink(self.tmp_path)
        except FileNotFoundError:
            pass


def write_text(path: str, what: str, text: str) -> str:
    """``text`` into ``path`` all at once: under a temporary name, then renamed into place."""
    def fill(temporary: str) -> None:
        with open(temporary, "w", encoding="utf-8") as stream:
            stream.write(text)

    return write_with(path, what, fill)


def write_with(path: str, what: str, writer: Callable[[str], object]) -> str:
    """``writer(temporary_path)`` fills a temporary beside ``path`` (a plotting library that writes by
    name, say), which is then renamed into place; if it fails, nothing is left behind.

    Raises:
        OutputError: ``path`` cannot be a whole file (:func:`check_target`) or the system refused the write,
            in one line naming it; what ``writer`` raises otherwise passes through.
    """
    target = check_target(path, what)
    try:
        return write_atomically(target, writer)
    except OSError as err:
        raise OutputError(f"cannot write {what} {path!r}: {err.strerror or err}") from None
