"""gRPC's own blocking ``ModelInfer`` call, made by a few worker threads per connection.

Why it exists beside the native transport: it speaks TLS and needs no compiler. Why
blocking calls on worker threads: measured on the 2-core machine (client CPU per request,
``time.process_time`` over thousands of requests to a local server; a small model, four requests per event
each after ~1 ms of Python work as MiniAOD's producers send them):

* ``grpc.aio`` on the framework's asyncio loop (the transport before): ~250 µs. Each request wakes the
  loop and runs a task, ``wait_for``/``shield`` for the deadline and tritonclient's wrappers there;
* gRPC's callback API (``ModelInfer.future``): ~230 µs. Its completions are read by a "channel spin
  thread" that gRPC starts whenever the channel goes from no call to one call, i.e. per request here.
  Keeping it alive takes a call held open on the server, which holds up Triton's graceful stop;
* a blocking call on a worker thread: ~160 µs, what is used. The worker wakes once per request
  (a ``SimpleQueue``), the call drives its own completion queue, the answer is read with
  ``np.frombuffer`` from ``raw_output_contents``.

MiniAOD's own requests replayed one at a time: 555 → 464 µs. What remains is mostly gRPC's C core,
and it grows with the time a call waits for its answer (~140 µs of the calling thread for an
immediate answer, ~380 µs for one after 20 ms, plus its event-engine threads).

A call gets only a safety deadline (``ORPHAN_DEADLINE_S``, or 10 × ``timeout_s``) for a server that never
answers: the caller's own deadline is kept by the connection, without cancelling the call. So a timed-out
call keeps its worker thread until it ends, and a connection has up to ``MAX_WORKERS`` threads (64 calls in
flight + ``ORPHAN_LIMIT``); they are started when a request finds none waiting and leave after
``WORKER_IDLE_S`` idle. A request still queued when its deadline passes is never sent.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Any

import grpc
from tritonclient.grpc import service_pb2_grpc

from ..bearer_token import BearerToken
from ..calls import ORPHAN_LIMIT, Call
from ...keepalive import Keepalive
from ...server_spec import ServerSpec

#: gRPC deadline of a call (at least; 10 × timeout_s if longer): only a server silent this long is cancelled
ORPHAN_DEADLINE_S = 600.0

#: worker threads of one connection at most (calls in flight, timed-out ones included); more wait queued
MAX_WORKERS = 64 + ORPHAN_LIMIT

#: a worker without a request for this long leaves (so a burst of timed-out calls leaves no threads behind)
WORKER_IDLE_S = 30.0

#: gRPC's own message size limits (4 MiB to receive by default) raised to Triton's
MAX_MESSAGE_BYTES = 2**31 - 1

#: the ``compression`` setting's values as gRPC names them (each call's own: requests of models differ)
COMPRESSION = {"none": None, "gzip": grpc.Compression.Gzip, "deflate": grpc.Compression.Deflate}


def channel_options(keepalive: Keepalive) -> list[tuple[str, int]]:
    """Options of every grpcio channel to a server, the control plane's (tritonclient's) too."""
    return [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES), *keepalive.channel_options()]


def open_channel(spec: ServerSpec, keepalive: Keepalive | None = None) -> grpc.Channel:
    """A gRPC channel to the server with the TLS settings of ``spec``, no message size limit below
    Triton's (gRPC's default 4 MiB would refuse large tensors sent in the message) and HTTP/2 keepalive
    pings (``keepalive.py``)."""
    options = channel_options(keepalive or Keepalive())
    if not spec.ssl:
        return grpc.insecure_channel(spec.address, options=options)

    def read(path: str | None) -> bytes | None:
        return Path(path).read_bytes() if path else None

    credentials = grpc.ssl_channel_credentials(read(spec.root_certificates), read(spec.private_key),
                                               read(spec.certificate_chain))
    return grpc.secure_channel(spec.address, credentials, options=options)


class GrpcioTransport:
    """The :class:`~.Transport` on grpcio: calls queued to worker threads that each make one blocking call.

    Args:
        spec (ServerSpec): address and TLS settings.
        timeout_s (float): the connection's per-request deadline (a call's safety deadline is 10 times that).
        keepalive (Keepalive): HTTP/2 pings on the channel.
        token (BearerToken | None): sent as each call's ``authorization`` metadata.

    Each call is compressed as it says (``Call.compression``: gRPC's own message compression).
    """

    name = "grpcio"

    def __init__(self, spec: ServerSpec, timeout_s: float, keepalive: Keepalive | None = None,
                 token: BearerToken | None = None):
        self.spec, self.timeout_s, self.keepalive = spec, timeout_s, keepalive or Keepalive()
        self.token = token
        self._lock = threading.Lock()  # guards everything below
        self._channel: grpc.Channel | None = None  # opened on first use
        self._model_infer: Any = None
        self._queue: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        self._workers = 0  # worker threads alive
        self._waiting = 0  # of them, waiting on the queue
        self._pending = 0  # requests (and stop marks) queued and not yet taken

    def send(self, call: Call) -> None:
        """Queues the call for a worker, starting one when none waits (up to ``MAX_WORKERS``)."""
        with self._lock:
            self._pending += 1
            spawn = self._waiting < self._pending and self._workers < MAX_WORKERS
            if spawn:
                self._workers += 1
        self._queue.put(call)
        if spawn:
            threading.Thread(target=self._work, name=f"sonic-grpc-{self.spec.address}", daemon=True).start()

    def _work(self) -> None:
        """A worker: takes requests off the queue and makes each call, blocking, to its end.

        It leaves after ``WORKER_IDLE_S`` without work, unless a request was queued meanwhile that no
        other waiting worker covers (so no request is ever left in the queue with nobody to take it).
        """
        while True:
            with self._lock:
                self._waiting += 1
            try:
                call = self._queue.get(timeout=WORKER_IDLE_S)
            except queue.Empty:
                with self._lock:
                    self._waiting -= 1
                    if self._pending > self._waiting:
                        continue
                    self._workers -= 1
                return
            with self._lock:
                self._waiting -= 1
                self._pending -= 1
                if call is None:  # closing
                    self._workers -= 1
                    return
            answer, error = None, None
            if call.begin():
                try:
                    identity = {"metadata": (("authorization", self.token.header()),)} if self.token else {}
                    answer = self._rpc()(call.request, timeout=max(ORPHAN_DEADLINE_S, 10 * self.timeout_s),
                                         compression=COMPRESSION[call.compression], **identity)
                except Exception as err:  # noqa: BLE001 - converted by the connection, at its one boundary
                    error = err
            call.end(answer, error)

    def _rpc(self) -> Any:
        """The ``ModelInfer`` callable of the channel (opened on first use, again after close)."""
        with self._lock:
            if self._channel is None:
                self._channel = open_channel(self.spec, self.keepalive)
                self._model_infer = service_pb2_grpc.GRPCInferenceServiceStub(self._channel).ModelInfer
            return self._model_infer

    def close(self) -> None:
        """The workers leave once the queue is empty; the channel closes, cancelling the calls still running."""
        with self._lock:
            channel, self._channel = self._channel, None
            workers = self._workers
            self._pending += workers
        for _ in range(workers):
            self._queue.put(None)
        try:
            if channel is not None:
                channel.close()
        except Exception:  # noqa: BLE001 - closing a channel to a dead server
            pass
