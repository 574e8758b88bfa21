"""The SONIC data plane's transports: what carries a ``ModelInferRequest`` to a server and its answer back.

Why a protocol: a :class:`~..connection.ServerConnection` builds each request (and stages shared memory),
keeps its deadline and reads its answer the same way whatever carries it; only sending differs. Each
transport is one module behind :class:`Transport`:

* ``native.py`` — gRPC over HTTP/2 on libnghttp2 (``grpc_h2.cc``), built on first use, the default where
  it builds;
* ``grpcio.py`` — gRPC's own blocking call on worker threads, for TLS, or where the native one cannot be
  built.

Both send each call in the gRPC encoding it names (``Call.compression``) and read compressed answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..calls import Call


class Transport(Protocol):
    """Carries the calls of one connection to one server.

    ``send`` returns at once (it never blocks on the answer). For each call it first asks
    :meth:`~..calls.Call.begin` and sends only when that says so, and it ends every call it was given
    exactly once with :meth:`~..calls.Call.end`: the server's ``ModelInferResponse``, or the error that
    ended the call (a call never begun ends with neither). Calls are never cancelled (a Triton 2.51 server
    can crash when clients cancel calls in flight).
    """

    #: "native" or "grpcio": what the connection reports as its transport
    name: str

    def send(self, call: Call) -> None:
        """Starts the call; its end comes later through ``call.end`` (on another thread, or at once)."""

    def close(self) -> None:
        """Ends the transport's channel: calls still open end (UNAVAILABLE or CANCELLED), calls queued and not
        begun are skipped; a later ``send`` opens a new channel."""
