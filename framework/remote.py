"""Remote input files: ``root://`` (XRootD) and ``http(s)://``, with transient read errors retried.

uproot reads a URL through fsspec; this file is the one place that knows about remote reading:

* **What is needed.** ``root://`` needs ``fsspec-xrootd`` and the XRootD client (``pip install
  'sonic-hep[remote]'``), ``http(s)://`` needs ``aiohttp``; a missing one is a one-line error with that
  command (through :func:`~sonic_hep.framework.extras.require`), not fsspec's "Install ..." traceback.
* **Retries.** Every byte-range read, size query and open of a remote file is retried when the error is
  transient (a dropped connection, a timeout, an HTTP 5xx/429, an XRootD "server busy"/I/O error; not a
  missing file, a refused permission or an untrusted certificate), up to
  :data:`TRIES` attempts with exponential back-off from :data:`BACKOFF_S` seconds; a file that does not
  exist or may not be read is not retried. When the tries are used up the job stops with one line naming
  the file, the last error and how long it tried (:class:`RemoteReadError`). The retrying readers are
  registered with fsspec for the ``root``/``http``/``https`` protocols the first time a remote file is
  opened, so every read uproot makes (the header at open, each basket while iterating) goes through them.
* **No ten-minute hangs.** The XRootD client by default retries a dead server for 5 × 120 s before it
  answers; unless the user set ``XRD_CONNECTIONWINDOW``/``XRD_CONNECTIONRETRY``/``XRD_REQUESTTIMEOUT``,
  it is told to answer within seconds, and the retries here take over (with a message at the end).

``SONIC_HEP_REMOTE_TRIES`` and ``SONIC_HEP_REMOTE_BACKOFF_S`` change the two numbers for a job (a grid
site with flaky storage may want more tries). An https server signed by a private CA is trusted through
``SSL_CERT_FILE`` (OpenSSL's variable, read by aiohttp).

Example::

    from sonic_hep.framework import remote
    remote.exists("root://eospublic.cern.ch//eos/opendata/cms/file.root")   # True / False, or RemoteReadError
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .errors import SourceError
from .extras import require

log = logging.getLogger(__name__)

T = TypeVar("T")

#: attempts per read (the first one included) before a transient error stops the job
TRIES = max(1, int(os.environ.get("SONIC_HEP_REMOTE_TRIES", "4")))
#: the first back-off; doubled after each failed attempt (1 + 2 + 4 s with the defaults)
BACKOFF_S = max(0.0, float(os.environ.get("SONIC_HEP_REMOTE_BACKOFF_S", "1.0")))

#: URL schemes read through XRootD or HTTP (``file://`` and local paths are not remote)
XROOTD_SCHEMES = ("root", "roots", "xroot", "xroots")
HTTP_SCHEMES = ("http", "https")

#: XRootD server error codes (XProtocol's kXR_*) worth another try: I/O or server-side trouble, overload,
#: "no server has it yet", a bad checksum in transit. Any other code (not found 3011, not authorized
#: 3010, is a directory 3016, invalid request ...) will fail again the same way.
XROOTD_TRANSIENT_CODES = frozenset({3005, 3007, 3008, 3012, 3014, 3019, 3020, 3024})
#: XRootD codes that mean the file is not there
XROOTD_NOT_FOUND_CODES = frozenset({3011})
#: HTTP statuses worth another try: timeouts, rate limits, server-side errors
HTTP_TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})

#: XRootD client settings (XrdCl environment names) applied unless the user's environment sets them
XROOTD_DEFAULTS = {"ConnectionWindow": 10, "ConnectionRetry": 1, "RequestTimeout": 120}

_registered: set[str] = set()
_lock = threading.Lock()
#: reads retried so far in this process (statistics, for tests and logs)
retried = 0


class RemoteReadError(SourceError):
    """A remote input file could not be read: not transient, or still failing after every retry."""


def scheme(path: str) -> str:
    """The URL scheme of ``path`` in lower case ("" for a local path)."""
    head, sep, _ = path.partition("://")
    return head.lower() if sep else ""


def is_remote(path: str) -> bool:
    """Whether ``path`` is read over the network (a URL other than ``file://``)."""
    return scheme(path) not in ("", "file")


def _one_line(err: BaseException) -> str:
    """The error's text on one line, without the object reprs fsspec-xrootd puts in (``<bound method ...>``)."""
    text = " ".join(str(err).split()) or type(err).__name__
    text = re.sub(r"<bound method (\S+) of <[^<>]*>>", r"\1", text)
    return text if len(text) <= 300 else text[:297] + "..."


def _xrootd_code(text: str) -> int | None:
    """The server's error code in an XRootD message (``... [3011] Unable to open ...``), if it gave one."""
    match = re.search(r"\[(3\d{3})\]", text)
    return int(match.group(1)) if match else None


def _cause(err: BaseException) -> BaseException:
    """The error behind ``err``: fsspec's HTTP size query turns every failure (a 503 too) into a
    ``FileNotFoundError`` raised *from* the real one."""
    if isinstance(err, FileNotFoundError) and err.__cause__ is not None:
        return err.__cause__
    return err


def transient(err: BaseException) -> bool:
    """Whether ``err`` from a remote read may go away if the read is tried again.

    The one table of what is retried: connection and timeout errors, HTTP 408/425/429/5xx, XRootD errors
    without a server code (connection, socket, "operation expired") or with a code in
    :data:`XROOTD_TRANSIENT_CODES`. A missing file, a refused permission or a malformed answer is not.
    """
    err = _cause(err)
    if isinstance(err, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return False
    if any("SSL" in cls.__name__ or "Certificate" in cls.__name__ for cls in type(err).__mro__):
        return False  # a certificate the client does not trust fails the same way every time
    if isinstance(err, (ConnectionError, TimeoutError, asyncio.TimeoutError)):
        return True
    status = getattr(err, "status", None)
    if isinstance(status, int) and 100 <= status < 600:  # aiohttp.ClientResponseError
        return status in HTTP_TRANSIENT_STATUS
    module = type(err).__module__ or ""
    if module.startswith("aiohttp"):  # ClientConnectionError, ServerDisconnectedError, payload errors ...
        return True
    if isinstance(err, OSError):
        code = _xrootd_code(str(err))
        if code is not None:
            return code in XROOTD_TRANSIENT_CODES
        return True  # XRootD's "[FATAL] Connection error", "[ERROR] Operation expired", socket errors
    return False


def not_found(err: BaseException) -> bool:
    """Whether ``err`` says the remote file does not exist."""
    cause = _cause(err)
    if cause is not err:  # an HTTP answer: only 404/410 say the file is not there
        return getattr(cause, "status", None) in (404, 410)
    return isinstance(err, FileNotFoundError) or _xrootd_code(str(err)) in XROOTD_NOT_FOUND_CODES


async def _with_retries(attempt: Callable[[], Awaitable[T]], url: str, what: str) -> T:
    """Runs ``attempt`` until it succeeds, retrying transient errors with back-off (see :func:`transient`).

    fsspec's ``cat_ranges`` may return exceptions in its result list instead of raising them: those count
    as a failed attempt too.
    """
    global retried
    start = time.monotonic()
    for number in range(1, TRIES + 1):
        try:
            result = await attempt()
            failed = [item for item in result if isinstance(item, BaseException)] if isinstance(result, list) else []
            if failed:
                raise failed[0]
            return result
        except RemoteReadError:
            raise
        except Exception as err:  # noqa: BLE001 - classified here, the one place that decides
            if not_found(err):
                raise FileNotFoundError(f"{url}: {_one_line(err)}") from None
            err = _cause(err)
            if not transient(err):
                raise RemoteReadError(f"cannot read {url!r} ({what}): {type(err).__name__}: {_one_line(err)}") \
                    from None
            if number == TRIES:
                raise RemoteReadError(f"cannot read {url!r} ({what}): {type(err).__name__}: {_one_line(err)}; "
                                      f"gave up after {TRIES} {'tries' if TRIES != 1 else 'try'} over {time.monotonic() - start:.1f} s "
                                      f"(SONIC_HEP_REMOTE_TRIES sets the number)") from None
            delay = BACKOFF_S * 2 ** (number - 1)
            with _lock:
                retried += 1
            log.warning("reading %s (%s) failed (%s: %s); try %d of %d in %.1f s", url, what,
                        type(err).__name__, _one_line(err), number + 1, TRIES, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")  # the loop returns or raises


class _RetryingReads:
    """Mixed into an fsspec async file system: its reads, size and info queries retry transient errors."""

    def _url(self, path: Any) -> str:
        path = path[0] if isinstance(path, list) and path else path
        return str(self.unstrip_protocol(path)) if isinstance(path, str) else str(path)

    async def _cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> Any:
        call = super()._cat_file  # type: ignore[misc]
        return await _with_retries(lambda: call(path, start=start, end=end, **kwargs), self._url(path),
                                   f"bytes {start}-{end}")

    async def _cat_ranges(self, paths: list[str], starts: Any, ends: Any, *args: Any, **kwargs: Any) -> Any:
        call = super()._cat_ranges  # type: ignore[misc]
        count = len(paths) if isinstance(paths, list) else 1
        return await _with_retries(lambda: call(paths, starts, ends, *args, **kwargs), self._url(paths),
                                   f"{count} byte range{'s' if count != 1 else ''}")

    async def _info(self, path: str, **kwargs: Any) -> Any:
        call = super()._info  # type: ignore[misc]
        return await _with_retries(lambda: call(path, **kwargs), self._url(path), "size and type")


def _retrying(base: type) -> type:
    """``base`` (an fsspec file system class) with :class:`_RetryingReads` in front of it."""
    return type(f"Retrying{base.__name__}", (_RetryingReads, base), {"__module__": __name__})


def _configure_xrootd() -> None:
    """XRootD client settings that let a dead server answer in seconds (see :data:`XROOTD_DEFAULTS`)."""
    client = require("XRootD.client", "reading root:// files", SourceError)
    for name, value in XROOTD_DEFAULTS.items():
        if f"XRD_{name.upper()}" not in os.environ:
            client.EnvPutInt(name, value)


def prepare(path: str) -> None:
    """Makes ``path``'s protocol readable with retries: checks the extra is installed, registers the
    retrying file system with fsspec (once per protocol and process).

    Raises:
        SourceError: the package the scheme needs is not installed (naming the pip command).
    """
    import fsspec

    proto = scheme(path)
    if proto in _registered:
        return
    with _lock:
        if proto in _registered:
            return
        if proto in XROOTD_SCHEMES:
            require("fsspec_xrootd", "reading root:// files", SourceError)
            _configure_xrootd()
            from fsspec_xrootd import XRootDFileSystem

            cls = _retrying(XRootDFileSystem)
        elif proto in HTTP_SCHEMES:
            require("aiohttp", f"reading {proto}:// files", SourceError)
            from fsspec.implementations.http import HTTPFileSystem

            cls = _retrying(HTTPFileSystem)
        else:  # s3://, gs:// ... : fsspec's own implementation, without our retries
            _registered.add(proto)
            return
        fsspec.register_implementation(proto, cls, clobber=True)
        _registered.add(proto)


def exists(path: str) -> bool:
    """Whether the input file ``path`` exists: ``os.path.exists`` for a local path; for a URL one
    metadata query (retried like every read) after :func:`prepare`.

    Raises:
        SourceError: a missing extra, or a remote file that cannot be queried (not transient, or after
            every retry), naming the URL.
    """
    if not is_remote(path):
        return os.path.exists(path.removeprefix("file://"))
    prepare(path)
    import fsspec

    try:
        fs, inner = fsspec.core.url_to_fs(path)
        fs.info(inner)
    except FileNotFoundError:
        return False
    except SourceError:
        raise
    except Exception as err:  # noqa: BLE001 - a URL fsspec cannot even parse, a server refusing us
        if not_found(err):
            return False
        raise RemoteReadError(f"cannot reach {path!r}: {type(err).__name__}: {_one_line(err)}") from None
    return True


def glob(url: str) -> list[str]:
    """The files a remote pattern (``root://host//store/run1/*.root``) matches, sorted, as URLs.

    XRootD lists directories; plain HTTP has no listing, so an http(s) pattern is refused in one line.

    Raises:
        SourceError: a scheme that cannot list, an unreachable server, or no match (naming the pattern).
    """
    proto = scheme(url)
    if proto not in XROOTD_SCHEMES:
        raise SourceError(f"cannot expand {url!r}: {proto}:// has no directory listing; list the files "
                          f"(or put them in a .txt file list)")
    prepare(url)
    import fsspec

    try:
        fs, pattern = fsspec.core.url_to_fs(url)
        matches = sorted(fs.glob(pattern))
    except Exception as err:  # noqa: BLE001 - a server refusing the listing, a malformed URL
        raise RemoteReadError(f"cannot list {url!r}: {type(err).__name__}: {_one_line(err)}") from None
    if not matches:
        raise SourceError(f"no input file matches {url!r}")
    return [fs.unstrip_protocol(match) for match in matches]
