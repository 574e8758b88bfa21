"""gRPC calls to Triton without Python's gRPC stack: ``grpc_h2.cc`` on libnghttp2, driven through ctypes.

Why it exists: on the cores a job shares with a local server, what SONIC costs over direct inference is
the client's CPU around each call, and in a Python job that CPU is mostly time holding the interpreter
lock (a worker thread woken per call, gRPC's Python wrappers, the lock taken back after the call), which
the job's own modules wait for. Here an I/O thread in C++ writes the requests and reads the answers, and
the answers reach Python in batches on one thread per connection. Python builds the request message and
reads the answer, nothing else. :class:`NativeTransport` is the :class:`~.Transport` on it, which a
:class:`~..connection.ServerConnection` uses for every server it reaches in clear text (TLS goes through
``grpcio.py``). Compressed requests are compressed here, on the caller's thread, and compressed answers
(a server told to compress its responses) are decompressed on the channel's completion thread
(``compression.py``; zlib lets the interpreter lock go meanwhile).

* built on first use with the system C++ compiler against the installed ``libnghttp2.so.14`` (Debian's
  ``libnghttp2-14``, which ``nghttp2-client`` and curl pull in), cached per source hash and architecture
  in ``~/.cache/sonic-hep/transport`` like the native backend (``library_cache``), checked by loading it
  in a fresh process before it is cached;
* no compiler or no library: :func:`transport_library` raises :class:`TransportUnavailable` with one line,
  and connections use ``grpcio`` (``transport: auto``; ``transport: native`` is then an error);
* the job's bearer token, where it may go (``bearer_token.py``), is each call's ``authorization`` header;
* a call the server refused without processing it (HTTP/2 REFUSED_STREAM: a proxy whose server went away) is sent
  once more, as gRPC's own clients do (their "transparent retry"); refused again, it fails UNAVAILABLE;
* calls are never cancelled (a Triton 2.51 server can crash when clients cancel): a call ends when the
  server answers or the connection ends, which fails every open call with UNAVAILABLE and the reason;
* a connection that goes silent ends by its keepalive (``keepalive.py``): a PING after ``time_s`` with
  nothing received, the connection dead when nothing answers it within ``timeout_s``.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import logging
import platform
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from tritonclient.grpc import service_pb2 as pb

from ..bearer_token import BearerToken
from ..calls import Call
from ...compression import compress, decompress
from ...keepalive import Keepalive
from ...serving.library_cache import BuildOnce, build_cached, compile_library, library_cache_folders
from ...triton_errors import RequestError, action_for

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
SOURCES = ("grpc_h2.cc", "nghttp2_api.h")
LIBRARY = "libnghttp2.so.14"
#: the built transport's file name (in ``<cache>/transport/grpc-h2-<hash>/``)
FILENAME = "libsonic_grpc_h2.so"
FLAGS = ("-std=c++17", "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-static-libstdc++", "-static-libgcc",
         "-Wl,--exclude-libs,ALL", "-pthread")
_lock = threading.Lock()  # loading the library once

#: what ``grpc_h2.cc`` says of a stream the server refused without processing it (HTTP/2 REFUSED_STREAM)
REFUSED = "REFUSED_STREAM"

#: the encodings ``sgt_send`` knows, by its number for them (0: not compressed)
ENCODINGS = {"none": 0, "deflate": 1, "gzip": 2}

#: gRPC's status codes by number (what the server puts in ``grpc-status``)
STATUS_NAMES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
                "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
                "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")


class TransportUnavailable(Exception):
    """The compiled transport cannot be built or loaded here; the message says why in one line."""


_builds = BuildOnce(TransportUnavailable)


def status_name(code: int) -> str:
    """``"UNAVAILABLE"`` for 14; ``"UNKNOWN"`` for a number gRPC does not define."""
    return STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else "UNKNOWN"


def build_key() -> str:
    """The cache entry's name: a hash of the sources, flags and architecture."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update((HERE / name).read_bytes())
    digest.update("\0".join([*FLAGS, LIBRARY, platform.machine()]).encode())
    return f"grpc-h2-{digest.hexdigest()[:16]}"


def transport_library() -> Path:
    """The compiled transport, built on first use (once per process; a failure is not retried).

    Raises:
        TransportUnavailable: no C++ compiler, no libnghttp2, or the build or its check failed.
    """
    key = build_key()
    return _builds.get(library_cache_folders("transport"), key, FILENAME, lambda: _build(key))


def _build(key: str) -> Path:
    from ...backends.native.build import NativeUnavailable, compiler

    try:
        cxx = compiler()
    except NativeUnavailable as err:
        raise TransportUnavailable(str(err)) from None

    def make(partial: Path) -> None:
        compile_library([cxx, *FLAGS, str(HERE / "grpc_h2.cc"), "-o", str(partial), f"-l:{LIBRARY}"], "grpc_h2.cc",
                        TransportUnavailable, lambda stderr: f"no {LIBRARY} to link the compiled transport against "
                        "(apt-get install libnghttp2-14)" if LIBRARY in stderr else None)
        check(partial)

    try:
        target = build_cached(library_cache_folders("transport"), key, FILENAME, "grpc-h2-*", make)
    except OSError as err:
        raise TransportUnavailable(f"cannot write the compiled transport to any cache folder ({err})") from None
    log.info("built the compiled gRPC transport %s", target)
    return target


def check(path: Path) -> None:
    """Loads ``path`` in a fresh process (a library that does not load is never cached)."""
    script = "import ctypes, sys; sys.exit(0 if ctypes.CDLL(sys.argv[1]).sgt_version() == 4 else 3)"
    try:
        done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        raise TransportUnavailable(f"cannot check {path.name}: {err}") from None
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise TransportUnavailable(f"the built {path.name} does not load: {why[0]}")


class _Api:
    """The library's functions: sending and reading results keep the interpreter lock (they take
    microseconds and must not let another thread in between); opening, waiting and freeing let it go."""

    def __init__(self, path: Path):
        free, held = ctypes.CDLL(str(path)), ctypes.PyDLL(str(path))
        self.open = free.sgt_open
        self.open.restype = ctypes.c_void_p
        self.open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                              ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        self.send = held.sgt_send
        self.send.restype = ctypes.c_int
        self.send.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
        self.wait = free.sgt_wait
        self.wait.restype = ctypes.c_int
        self.wait.argtypes = [ctypes.c_void_p, ctypes.c_int]
        self.result = held.sgt_result
        self.result.restype = ctypes.c_int
        self.result.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64),
                                ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p),
                                ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_char_p),
                                ctypes.POINTER(ctypes.c_char_p)]
        self.close = held.sgt_close
        self.reason = held.sgt_reason
        self.reason.restype = ctypes.c_char_p
        self.reason.argtypes = [ctypes.c_void_p]
        self.close.argtypes = [ctypes.c_void_p]
        self.free = free.sgt_free
        self.free.argtypes = [ctypes.c_void_p]
        self.authorize = held.sgt_authorize
        self.authorize.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


_api: _Api | None = None


def api() -> _Api:
    """The loaded library (built on first use). Raises :class:`TransportUnavailable`."""
    global _api
    if _api is None:
        path = transport_library()
        with _lock:
            if _api is None:
                _api = _Api(path)
    return _api


#: ``on_done(tag, status name, status message, answer message bytes, its encoding if compressed else "")``
OnDone = Callable[[int, str, str, bytes, str], None]


class NativeChannel:
    """One HTTP/2 connection to a server's gRPC port, for ``ModelInfer`` calls.

    ``send`` queues a call and returns at once; ``on_done`` runs for each finished call on the channel's
    completion thread (one per channel, which waits in C without the interpreter lock). When the
    connection ends (``close``, the server dropped it, or its keepalive found it silent) every open call
    finishes with UNAVAILABLE, ``send`` returns False (the owner opens a new channel) and :attr:`reason`
    says why it ended.

    Raises:
        ConnectionError: the server could not be reached (one line, with the address and the reason).
    """

    PATH = b"/inference.GRPCInferenceService/ModelInfer"

    def __init__(self, host: str, port: int, on_done: OnDone, connect_timeout_s: float = 5.0,
                 keepalive: Keepalive | None = None):
        self._api = api()
        self.authority = f"{host}:{port}"
        self.keepalive = keepalive or Keepalive()
        self.reason = ""  # why the connection ended, once it has
        error = ctypes.create_string_buffer(512)
        handle = self._api.open(host.strip("[]").encode(), port, self.authority.encode(), self.PATH,
                                int(connect_timeout_s * 1000), int(self.keepalive.time_s * 1000),
                                int(self.keepalive.timeout_s * 1000), error, len(error))
        if not handle:
            raise ConnectionError(error.value.decode(errors="replace"))
        self._handle: int | None = handle
        self._authorization = ""  # what sgt_authorize was last told (never logged)
        self._lock = threading.Lock()  # send vs. the end of the connection (after which the handle is freed)
        self._on_done = on_done
        self._thread = threading.Thread(target=self._complete, name=f"sonic-h2-{self.authority}", daemon=True)
        self._thread.start()

    def send(self, tag: int, message: bytes, encoding: str = "none", authorization: str = "") -> bool:
        """Queues one call (``message`` already in ``encoding``; ``authorization``: its header value, if any);
        False when the connection has ended (nothing was sent)."""
        with self._lock:
            if self._handle is not None and authorization != self._authorization:
                self._api.authorize(self._handle, authorization.encode())
                self._authorization = authorization
            return self._handle is not None and self._api.send(self._handle, tag, message, len(message),
                                                               ENCODINGS[encoding]) == 0

    def close(self, wait_s: float = 10.0) -> None:
        """Ends the connection: open calls finish with UNAVAILABLE (their ``on_done`` runs); waits for that."""
        with self._lock:
            if self._handle is not None:
                self._api.close(self._handle)
        if threading.current_thread() is not self._thread:
            self._thread.join(wait_s)

    @property
    def alive(self) -> bool:
        return self._handle is not None and self._thread.is_alive()

    def _complete(self) -> None:
        handle = self._handle
        tag, status = ctypes.c_uint64(), ctypes.c_int()
        body, length, message, encoding = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_char_p(), ctypes.c_char_p()
        while True:
            count = self._api.wait(handle, 1000)
            if count < 0:
                break
            for index in range(count):
                self._api.result(handle, index, tag, status, body, length, message, encoding)
                data = ctypes.string_at(body.value, length.value) if length.value else b""
                text = (message.value or b"").decode(errors="replace")
                try:
                    self._on_done(tag.value, status_name(status.value), text, data,
                                  (encoding.value or b"").decode(errors="replace"))
                except Exception:  # noqa: BLE001 - this thread finishes every call of the channel: it must not die
                    log.exception("handling the answer of call %d on %s", tag.value, self.authority)
        self.reason = (self._api.reason(handle) or b"").decode(errors="replace")
        with self._lock:
            self._handle = None
        self._api.free(handle)


class NativeTransport:
    """The :class:`~.Transport` on :class:`NativeChannel`: one HTTP/2 connection per server connection, opened
    on first use and again after it ended (the server dropped it, its keepalive found it silent, or a fork:
    the child has no I/O thread). Calls are never cancelled and have no deadline of their own.

    Args:
        address (str): the server's ``host:port`` (clear text).
        keepalive (Keepalive): HTTP/2 pings; half as often after the server refused them (``too_many_pings``).
        token (BearerToken | None): sent as each call's ``authorization`` header.
    """

    name = "native"

    def __init__(self, address: str, keepalive: Keepalive | None = None, token: BearerToken | None = None):
        self.address = address
        self.token = token
        self.keepalive = keepalive or Keepalive()
        self._lock = threading.Lock()  # the calls in flight
        self._by_tag: dict[int, Call] = {}  # calls in flight by their tag
        self._tags = itertools.count(1)
        self._resent: set[int] = set()  # tags of calls sent again after a REFUSED_STREAM (once each)
        self._channel: NativeChannel | None = None
        self._channel_lock = threading.Lock()  # opening it (seconds at worst) without holding up the others

    def send(self, call: Call, again: bool = False) -> None:
        """Hands the call to the connection (opened, or opened again after it ended, here); ``again``: a call the
        server refused without processing it, sent once more."""
        if not call.begin():
            call.end(None, None)
            return
        tag = next(self._tags)
        with self._lock:
            self._by_tag[tag] = call
            if again:
                self._resent.add(tag)
        message = call.request.SerializeToString()
        packed = compress(message, call.compression)
        encoding = call.compression if packed is not None else "none"  # not smaller: sent as it is, as gRPC does
        authorization = self.token.header() if self.token else ""
        try:
            for _ in range(2):  # a connection that ended since the last call: one new try
                if self._open().send(tag, packed or message, encoding, authorization):
                    return
            raise ConnectionError(f"the connection to {self.address} ended as the request was sent")
        except Exception as err:  # noqa: BLE001 - unreachable, or the connection broke: failed over like any
            self._done(tag, "UNAVAILABLE", str(err) or type(err).__name__, b"", "")

    def _open(self) -> NativeChannel:
        with self._channel_lock:
            channel = self._channel
            if channel is None or not channel.alive:
                if channel is not None and "too_many_pings" in channel.reason:
                    self.keepalive = _calmer(self.keepalive, self.address)
                host, _, port = self.address.rpartition(":")
                channel = self._channel = NativeChannel(host, int(port), self._done, keepalive=self.keepalive)
            return channel

    def _done(self, tag: int, status: str, message: str, body: bytes, encoding: str) -> None:
        """A call ended (on the channel's completion thread): its answer decompressed where the server compressed
        it, parsed, and the call ended."""
        with self._lock:
            call = self._by_tag.pop(tag, None)
            refused = status == "UNAVAILABLE" and REFUSED in message and tag not in self._resent
            self._resent.discard(tag)
        if call is None:
            return
        if refused:  # not processed (a proxy whose server went away): sent once more, as gRPC's own clients do
            log.debug("a call of %s to %s was refused without being processed; sending it once more", call.model,
                      self.address)
            self.send(call, again=True)
            return
        answer, error = None, None
        if status == "OK":
            try:
                answer = pb.ModelInferResponse.FromString(decompress(body, encoding) if encoding else body)
            except Exception as err:  # noqa: BLE001 - converted by the connection, at its one boundary
                error = err
        else:
            error = RequestError(call.model, self.address, status, message or status.lower(),
                                 action_for(status, message))
        call.end(answer, error)

    def close(self) -> None:
        """Ends the connection: its calls still open end now (UNAVAILABLE)."""
        with self._channel_lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()


def _calmer(keepalive: Keepalive, address: str) -> Keepalive:
    """Pings half as often: the server ended a native connection for pinging more often than it allows (gRPC's
    own client does the same). Logged at each step: the server's flags are what should change."""
    slower = Keepalive(min(2 * keepalive.time_s, 3600.0), keepalive.timeout_s)
    if slower != keepalive:
        log.warning(f"Triton server {address} refuses HTTP/2 pings every {keepalive.time_s:g} s (too_many_pings): "
                    f"pinging every {slower.time_s:g} s now; start it with "
                    "--grpc-http2-min-recv-ping-interval-without-data and --grpc-keepalive-permit-without-calls=1 "
                    "(as `sonic server start` does)")
    return slower
