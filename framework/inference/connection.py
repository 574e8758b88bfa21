"""One Triton server as the SONIC client sees it: a gRPC channel, the models it serves, requests to it.

:class:`ServerConnection` sends *one* request (already split and checked by the client) and hands back
a ``concurrent.futures.Future``; it never blocks on the result. Control calls (readiness, configs,
statistics, shared memory registration) use tritonclient's blocking client. Inputs (and outputs of
fixed size) travel through system shared memory when the pool says the server is on this host. Every
error leaves this file as a :class:`~.triton_errors.RequestError` (see ``triton_errors.py``).

Two transports carry the ``ModelInferRequest`` built on the caller's thread (``transport`` below):

* **native** (the default where it builds): ``transport/grpc_h2.cc``, an HTTP/2 client on libnghttp2
  whose I/O thread runs without the interpreter lock and hands finished calls to one Python thread per
  connection in batches (``transport/native.py`` says why). A call to a local server costs about half the
  process CPU of gRPC's own blocking call (87 vs 179 µs for ``demo_mlp``, one call at a time);
* **grpcio**, for TLS, gRPC compression, or where the native one cannot be built: gRPC's *blocking*
  ``ModelInfer`` call, made by a few worker threads per connection. Measured on the 2-core machine
(client CPU per request, ``time.process_time`` over thousands of requests to a local server; a small
model, four requests per event each after ~1 ms of Python work as MiniAOD's producers send them):

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

Deadlines stay local (see :class:`ServerConnection`): one keeper thread for all connections
(:class:`_Deadlines`) fails a caller at ``timeout_s`` while its call runs on (on grpcio, holding its worker).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import os
import queue
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor, triton_to_np_dtype

from ..errors import ConfigError
from .keepalive import Keepalive
from .repository import ModelInfo, TensorSpec, parse_specs
from .shm import SharedMemoryPool, aligned
from .tls_probe import certificate_problem, hint, server_tls
from .transport import native
from .triton_errors import ACTIONS, RequestError, action_for, convert

log = logging.getLogger(__name__)

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}

#: in ``shared_memory: auto``, requests smaller than this go in the gRPC message
SHM_MIN_BYTES = 16 * 1024

#: gRPC deadline of a call (at least; 10 × timeout_s if longer): only a server silent this long is cancelled
ORPHAN_DEADLINE_S = 600.0

#: timed-out calls still running on one server beyond which new requests fail at once (and fail over)
ORPHAN_LIMIT = 256

#: at close, how long to wait for calls still running before the channel (and so they) are closed
CLOSE_GRACE_S = 5.0

#: worker threads of one connection at most (calls in flight, timed-out ones included); more wait queued
MAX_WORKERS = 64 + ORPHAN_LIMIT

#: a worker without a request for this long leaves (so a burst of timed-out calls leaves no threads behind)
WORKER_IDLE_S = 30.0

#: gRPC's own message size limits (4 MiB to receive by default) raised to Triton's
MAX_MESSAGE_BYTES = 2**31 - 1


@dataclass(frozen=True)
class ServerSpec:
    """Where a server is and how to talk to it (one entry of ``services.inference.servers``).

    Written as ``"host:port"`` or as a mapping::

        {address: host, port: 8001, ssl: true, root_certificates: ca.pem, private_key: key.pem,
         certificate_chain: cert.pem}
    """

    address: str
    ssl: bool = False
    root_certificates: str | None = None
    private_key: str | None = None
    certificate_chain: str | None = None

    @classmethod
    def parse(cls, item: Any, key: str = "services.inference.servers") -> ServerSpec:
        if isinstance(item, ServerSpec):
            return item
        if isinstance(item, str):
            host, sep, port = item.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(f"server {item!r} must look like HOST:PORT", key=key)
            return cls(item)
        if isinstance(item, Mapping):
            known = {"address", "port", "ssl", "root_certificates", "private_key", "certificate_chain"}
            unknown = set(item) - known
            if unknown or "address" not in item:
                raise ConfigError(f"server entry {dict(item)} needs 'address' (and 'port'); known keys "
                                  f"{sorted(known)}", key=key)
            address = str(item["address"])
            if "port" in item:
                address = f"{address}:{int(item['port'])}"
            return cls(address, bool(item.get("ssl", False)), item.get("root_certificates"),
                       item.get("private_key"), item.get("certificate_chain"))
        raise ConfigError(f"server entry must be 'HOST:PORT' or a mapping, not {type(item).__name__}", key=key)

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0]

    @property
    def local(self) -> bool:
        """On this host (so system shared memory can be used)."""
        return self.host in LOCAL_HOSTS


@dataclass
class _OutputSlot:
    name: str
    dtype: np.dtype
    offset: int


class ServerConnection:
    """A channel to one server.

    Deadlines are local. Triton 2.51's gRPC frontend can crash (SIGSEGV) when clients cancel calls in
    flight, and a gRPC deadline is such a cancellation; a client must not be able to take a shared
    server down by timing out. So a request that passes ``timeout_s`` fails for its caller with
    status ``DEADLINE_EXCEEDED`` (retried or failed over like before) while its call runs on to its
    end and the answer is dropped; its shared memory region is reused only after that end. On grpcio
    the call gets only a safety deadline (``ORPHAN_DEADLINE_S``, or 10 × ``timeout_s``) for a server
    that never answers; on the native transport none at all: its call ends when the server answers or
    the connection ends (a server process that died drops it at once). While ``ORPHAN_LIMIT`` such calls are unanswered, new requests fail at once
    (DEADLINE_EXCEEDED, to be failed over) instead of piling more work on a server that is far
    behind. :meth:`close` waits ``CLOSE_GRACE_S`` for such calls before closing.

    On grpcio, a timed-out call keeps its worker thread until it ends, so a connection has up to ``MAX_WORKERS``
    threads (64 calls in flight + ``ORPHAN_LIMIT``); they are started when a request finds none
    waiting and leave after ``WORKER_IDLE_S`` idle. A request still queued when its deadline passes is
    never sent.

    Args:
        spec (ServerSpec): address and TLS settings.
        timeout_s (float): per-request deadline, enforced here: the caller gets DEADLINE_EXCEEDED after
            ``timeout_s`` but the gRPC call is *not* cancelled (see below).
        compression (str): "none", "gzip" or "deflate" (gRPC message compression).
        shared_memory (str): "on" (tensors through system shared memory), "off", or "auto": shared
            memory for requests of at least ``SHM_MIN_BYTES`` (below that, copying into the gRPC
            message costs less than the extra bookkeeping). Only with a server that has shown, at the
            connection's probe, that it opens this host's regions; else the wire, after one notice ("on":
            one warning).
        model_versions (dict): pinned model versions (default: the server's choice).
        transport (str): "auto" (the compiled transport for servers reached in clear text without
            compression, where it builds; else grpcio), "native" (an error where it cannot be used) or
            "grpcio" (see the module docstring).
        keepalive (Keepalive | None): HTTP/2 pings on every channel of this connection, so a silent one (a
            network partition) ends in seconds, failing its calls with UNAVAILABLE (``keepalive.py``).
    """

    def __init__(self, spec: ServerSpec, timeout_s: float = 60.0, compression: str = "none",
                 shared_memory: str = "off", model_versions: Mapping[str, int] | None = None,
                 transport: str = "auto", keepalive: Keepalive | None = None):
        self.spec = spec
        self.keepalive = keepalive or Keepalive()
        self._native_keepalive = self.keepalive  # pings half as often after a server refused them (too_many_pings)
        self.address = spec.address
        self.timeout_s = timeout_s
        self.compression = {"none": None, "gzip": grpc.Compression.Gzip, "deflate": grpc.Compression.Deflate}[compression]
        self.model_versions = {k: str(v) for k, v in (model_versions or {}).items()}
        self.client = grpcclient.InferenceServerClient(spec.address, ssl=spec.ssl,
                                                       root_certificates=spec.root_certificates,
                                                       private_key=spec.private_key,
                                                       certificate_chain=spec.certificate_chain,
                                                       channel_args=channel_options(self.keepalive))
        self.shm = (SharedMemoryPool(self.client, spec.address, forced=shared_memory == "on")
                    if shared_memory in ("on", "auto") else None)
        self.shm_min_bytes = SHM_MIN_BYTES if shared_memory == "auto" else 0
        self._lock = threading.Lock()  # guards everything below
        self._idle = threading.Condition(self._lock)  # notified when the last call ends (close waits for it)
        self._channel: grpc.Channel | None = None  # the data plane's channel, opened on first use
        self._model_infer: Any = None
        self._calls: set[_Call] = set()  # sent (or queued) and not finished, timed-out ones included
        self._orphans = 0  # those of them whose caller timed out
        self.orphaned = 0  # requests that timed out locally and were left to finish
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._workers = 0  # worker threads alive
        self._waiting = 0  # of them, waiting on the queue
        self._pending = 0  # requests (and stop marks) queued and not yet taken
        self.transport = self._choose_transport(transport)
        self._h2: native.NativeChannel | None = None  # the native transport's connection, opened on first use
        self._h2_lock = threading.Lock()  # opening it (seconds at worst) without holding up the others
        self._by_tag: dict[int, _Call] = {}  # native calls in flight by their tag
        self._tags = itertools.count(1)

    # -- control plane (blocking, short) ---------------------------------------------------------------
    def probe(self, timeout: float = 5.0) -> dict[str, str]:
        """``{model: version}`` of the models ready on the server; RequestError if it does not answer."""
        try:
            if not self.client.is_server_live(client_timeout=timeout):
                raise RequestError("*", self.address, "UNAVAILABLE", "server is not live", "failover")
            index = self.client.get_model_repository_index(client_timeout=timeout)
        except RequestError:
            raise
        except Exception as err:  # noqa: BLE001 - converted at this boundary
            error = convert(err, "*", self.address)
            closed = error.status == "UNAVAILABLE" and "socket closed" in str(error).lower()  # all gRPC says
            why = hint(server_tls(self.address), self.spec.ssl, bool(self.spec.certificate_chain)) if closed else None
            if why is None and self.spec.ssl and error.status == "UNAVAILABLE":  # gRPC: "Socket closed", or OpenSSL
                why = certificate_problem(self.address, self.spec.root_certificates, self.spec.private_key,
                                          self.spec.certificate_chain)
            raise (RequestError("*", self.address, "UNAVAILABLE", why, "failover") if why else error) from None
        if self.shm is not None:  # proven now, before the first request that would use it (shm.py)
            self.shm.usable(timeout)
        return {m.name: m.version for m in index.models if m.state == "READY"}

    def model_info(self, model: str, version: str = "") -> ModelInfo:
        """The model's config as the server has it (inputs, outputs, dims, max_batch_size)."""
        try:
            response = self.client.get_model_config(model, self.model_versions.get(model, ""), client_timeout=10)
        except Exception as err:  # noqa: BLE001
            raise convert(err, model, self.address) from None
        config = response.config
        return ModelInfo(name=model, path=None, config=config, version=int(version or 0) if str(version).isdigit() else 0,
                         inputs=parse_specs(config.input), outputs=parse_specs(config.output))

    def statistics(self, model: str = "") -> dict[tuple[str, str], dict[str, float]]:
        """Cumulative server-side counters per ``(model, version)`` (all models when ``model`` is "")."""
        try:
            response = self.client.get_inference_statistics(model, client_timeout=5)
        except Exception as err:  # noqa: BLE001
            raise convert(err, model or "*", self.address) from None
        out = {}
        for s in response.model_stats:
            st = s.inference_stats
            out[(s.name, s.version)] = {
                "requests": st.success.count, "failures": st.fail.count, "inferences": s.inference_count,
                "executions": s.execution_count, "queue_ns": st.queue.ns, "compute_input_ns": st.compute_input.ns,
                "compute_infer_ns": st.compute_infer.ns, "compute_output_ns": st.compute_output.ns}
        return out

    # -- data plane (non-blocking) ----------------------------------------------------------------------
    def stages(self, inputs: Mapping[str, np.ndarray]) -> bool:
        """Whether a request with these inputs goes through shared memory: with a pool, inputs of at least
        ``shm_min_bytes`` together, and numbers only (a region holds raw values; strings go in the message, in
        Triton's length-prefixed form), to a server that has shown it opens our regions
        (``SharedMemoryPool.usable``)."""
        return (self.shm is not None and sum(a.nbytes for a in inputs.values()) >= self.shm_min_bytes
                and all(a.dtype.kind in "biuf" for a in inputs.values()) and self.shm.usable())

    def send(self, info: ModelInfo, inputs: Mapping[str, np.ndarray], outputs: list[str]) -> Future:
        """Starts one request; the Future gives ``{output: array}`` or fails with a RequestError.

        The request message is built (and shared memory staged) on the caller's thread, so the caller
        may reuse its arrays at once; one of the connection's worker threads makes the blocking call
        and completes the Future, or the deadline keeper fails it after ``timeout_s``.
        """
        future: Future = Future()
        region = None
        try:
            with self._lock:
                orphans = self._orphans
            if orphans >= ORPHAN_LIMIT:  # the server is far behind: do not pile more work on it
                raise RequestError(info.name, self.address, "DEADLINE_EXCEEDED",
                                   f"{orphans} earlier requests timed out and are still unanswered; "
                                   "not sending more to this server", "failover")
            request = pb.ModelInferRequest(model_name=info.name, model_version=self.model_versions.get(info.name, ""))
            slots: list[_OutputSlot] = []
            if self.stages(inputs):
                region, slots = self._stage(info, inputs, outputs, request)
            else:
                types = _datatypes(info, inputs)
                for name, array in inputs.items():
                    tensor = request.inputs.add(name=name, datatype=types[name], shape=array.shape)
                    request.raw_input_contents.append(_raw(array, tensor.datatype))
                for name in outputs:
                    request.outputs.add(name=name)
        except Exception as err:  # noqa: BLE001 - a failure to send is reported like a failed request
            if region is not None:
                self.shm.release(region)
            future.set_exception(convert(err, info.name, self.address))
            return future
        call = _Call(self, info.name, request, outputs, slots, region, future, time.monotonic() + self.timeout_s)
        if self.transport == "native":
            self._send_native(call)
            return future
        with self._lock:
            self._calls.add(call)
            self._pending += 1
            spawn = self._waiting < self._pending and self._workers < MAX_WORKERS
            if spawn:
                self._workers += 1
        _DEADLINES.add(call)
        self._queue.put(call)
        if spawn:
            threading.Thread(target=self._work, name=f"sonic-grpc-{self.address}", daemon=True).start()
        return future

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
                started = call.started = not call.expired  # an expired request still queued is not sent
            values, error = None, None
            if started:
                try:
                    values = self._call(call)
                except Exception as err:  # noqa: BLE001 - converted at this boundary
                    error = convert(err, call.model, self.address)
            if call.region is not None:  # only now: the server may write into it until the call ends
                self.shm.release(call.region)
            self._finish(call, values, error)

    def _call(self, call: _Call) -> dict[str, np.ndarray]:
        """The RPC itself (blocking), and its outputs read from the message or from shared memory."""
        response = self._rpc()(call.request, timeout=max(ORPHAN_DEADLINE_S, 10 * self.timeout_s),
                               compression=self.compression)
        return self._read(call, response)

    def _read(self, call: _Call, response: pb.ModelInferResponse) -> dict[str, np.ndarray]:
        """The outputs of an answer, from the message or from the call's shared memory region."""
        by_name = {slot.name: slot for slot in call.slots}
        got = {}
        raw = response.raw_output_contents
        for index, output in enumerate(response.outputs):
            slot = by_name.get(output.name)
            if slot is not None:
                got[output.name] = call.region.read(slot.dtype, list(output.shape), slot.offset)
                continue
            data = raw[index] if index < len(raw) else b""
            if output.datatype == "BYTES":
                got[output.name] = deserialize_bytes_tensor(data).reshape(output.shape)
            else:
                got[output.name] = np.frombuffer(data, triton_to_np_dtype(output.datatype)).reshape(output.shape)
        missing = [name for name in call.outputs if name not in got]
        if missing:
            raise RequestError(call.model, self.address, "INTERNAL", f"the answer lacks outputs {missing}", "fatal")
        values = {name: got[name] for name in call.outputs}
        return values

    # -- the native transport ---------------------------------------------------------------------------
    def _choose_transport(self, asked: str) -> str:
        """"native" or "grpcio" for ``asked`` (see the class docstring); says once why native is not used."""
        if asked not in ("auto", "native", "grpcio"):
            raise ConfigError(f"transport must be auto, native or grpcio, not {asked!r}",
                              key="services.inference.transport")
        if asked == "grpcio":
            return asked
        reason = ("it speaks clear text only (this server uses TLS)" if self.spec.ssl else
                  "it does not compress (compression is asked)" if self.compression is not None else None)
        missing = False
        if reason is None:
            try:
                native.api()
                return "native"
            except native.TransportUnavailable as err:
                reason, missing = str(err), True
        if asked == "native":
            raise ConfigError(f"the native transport cannot be used for {self.address}: {reason}",
                              key="services.inference.transport")
        _say_once(f"SONIC requests to {self.address} go through grpcio: the native transport is not used ({reason})",
                  logging.WARNING if missing else logging.INFO)  # a missing compiler costs CPU: worth a warning
        return "grpcio"

    def _send_native(self, call: _Call) -> None:
        """Hands the call to the native connection (opened, or opened again after it ended, here)."""
        tag = next(self._tags)
        with self._lock:
            self._calls.add(call)
            self._by_tag[tag] = call
            call.started = True
        _DEADLINES.add(call)
        message = call.request.SerializeToString()
        try:
            for _ in range(2):  # a connection that ended since the last call: one new try
                if self._channel_native().send(tag, message):
                    return
            raise ConnectionError(f"the connection to {self.address} ended as the request was sent")
        except Exception as err:  # noqa: BLE001 - unreachable, or the connection broke: failed over like any
            self._native_done(tag, "UNAVAILABLE", str(err) or type(err).__name__, b"")

    def _channel_native(self) -> native.NativeChannel:
        with self._h2_lock:
            channel = self._h2
            if channel is None or not channel.alive:
                if channel is not None and "too_many_pings" in channel.reason:
                    self._native_keepalive = _calmer(self._native_keepalive, self.address)
                host, _, port = self.address.rpartition(":")
                channel = self._h2 = native.NativeChannel(host, int(port), self._native_done,
                                                          keepalive=self._native_keepalive)
            return channel

    def _native_done(self, tag: int, status: str, message: str, body: bytes) -> None:
        """A native call ended (on its connection's completion thread): its answer read, its call finished."""
        with self._lock:
            call = self._by_tag.pop(tag, None)
        if call is None:
            return
        values, error = None, None
        if status == "OK":
            try:
                values = self._read(call, pb.ModelInferResponse.FromString(body))
            except Exception as err:  # noqa: BLE001 - converted at this boundary
                error = convert(err, call.model, self.address)
        else:
            error = RequestError(call.model, self.address, status, message or status.lower(),
                                 action_for(status, message))
        if call.region is not None:  # only now: the server may write into it until the call ends
            self.shm.release(call.region)
        self._finish(call, values, error)

    def _finish(self, call: _Call, values: dict[str, np.ndarray] | None, error: BaseException | None) -> None:
        """The call ended: its caller gets the outcome unless its deadline already failed it."""
        with self._lock:
            call.finished = True
            self._calls.discard(call)
            if call.expired:
                self._orphans -= 1
            if not self._calls:
                self._idle.notify_all()
            future, expired = call.release()
        if expired:
            return  # nobody waits for it any more: the outcome is dropped
        try:
            if error is None:
                future.set_result(values)
            else:
                future.set_exception(error)
        except InvalidStateError:  # the caller cancelled it
            pass

    def _expire(self, call: _Call) -> None:
        """The deadline keeper's verdict: fail the caller now, let the call run on (never cancelled)."""
        with self._lock:
            if call.finished:
                return
            call.expired = True
            self._orphans += 1
            self.orphaned += 1
            future = call.future
        try:
            future.set_exception(RequestError(call.model, self.address, "DEADLINE_EXCEEDED",
                                              f"no answer within {self.timeout_s:g} s (the request was left to finish "
                                              "on the server, or not sent if still queued; its answer will be dropped)",
                                              ACTIONS["DEADLINE_EXCEEDED"]))
        except InvalidStateError:  # the caller cancelled it
            pass

    def _rpc(self) -> Any:
        """The ``ModelInfer`` callable of this connection's channel (opened on first use, again after close)."""
        with self._lock:
            if self._channel is None:
                self._channel = open_channel(self.spec, self.keepalive)
                self._model_infer = service_pb2_grpc.GRPCInferenceServiceStub(self._channel).ModelInfer
            return self._model_infer

    def _stage(self, info: ModelInfo, inputs: Mapping[str, np.ndarray], outputs: list[str],
               request: pb.ModelInferRequest) -> tuple[Any, list[_OutputSlot]]:
        """Puts the inputs into one borrowed region and reserves room there for fixed-size outputs (in
        ``auto``, those of at least ``SHM_MIN_BYTES``: reading a few scores from the message costs less)."""
        batch = next(iter(inputs.values())).shape[0] if info.max_batch_size > 0 else None
        specs = {spec.name: spec for spec in info.outputs}
        sizes = []
        for name in outputs:
            if not fixed_size(specs[name]):
                sizes.append(None)  # size unknown before the answer: comes back in the message
                continue
            shape = ([batch] if batch is not None else []) + list(specs[name].dims)
            sizes.append(math.prod(shape) * specs[name].dtype.itemsize)
        types = _datatypes(info, inputs)
        total = sum(aligned(a.nbytes) for a in inputs.values()) + sum(aligned(s) for s in sizes if s)
        region = self.shm.acquire(total)
        try:
            offset = 0
            for name, array in inputs.items():
                region.write(array, offset)
                tensor = request.inputs.add(name=name, datatype=types[name], shape=array.shape)
                _in_region(tensor.parameters, region.name, array.nbytes, offset)
                offset += aligned(array.nbytes)
            slots = []
            for name, size in zip(outputs, sizes):
                out = request.outputs.add(name=name)
                if size and size >= self.shm_min_bytes:  # a small output is cheaper to read from the message
                    _in_region(out.parameters, region.name, size, offset)
                    slots.append(_OutputSlot(name, specs[name].dtype, offset))
                    offset += aligned(size)
        except BaseException:
            self.shm.release(region)
            raise
        return region, slots

    def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """Waits up to ``grace_s`` for calls still running (timed-out ones included), then closes.

        Closing the channel cancels whatever still runs, which is what may crash Triton 2.51, and the
        shared memory regions are unregistered only after that, so the server never writes into a
        region that is gone. Requests still queued then are failed (CANCELLED) and never sent. The
        workers leave; a later request opens the channel again.
        """
        with self._lock:
            end = time.monotonic() + grace_s
            while self._calls and (left := end - time.monotonic()) > 0:
                self._idle.wait(left)
            channel, self._channel = self._channel, None
            workers = self._workers
            self._pending += workers
            unsent = [call for call in self._calls if not call.started and not call.expired]
            for call in unsent:  # the worker that takes it skips it, as one whose deadline passed
                call.expired = True
                self._orphans += 1
        for call in unsent:
            try:
                call.future.set_exception(RequestError(call.model, self.address, "CANCELLED",
                                                       "the connection was closed before this request was sent",
                                                       ACTIONS["CANCELLED"]))
            except InvalidStateError:
                pass
        for _ in range(workers):
            self._queue.put(None)
        try:
            if channel is not None:
                channel.close()
        except Exception:  # noqa: BLE001 - closing a channel to a dead server
            pass
        with self._h2_lock:
            h2, self._h2 = self._h2, None
        if h2 is not None:  # its calls still open finish now (UNAVAILABLE), their regions released
            h2.close()
        if self.shm is not None:
            self.shm.close()
        try:
            self.client.close()
        except Exception:  # noqa: BLE001
            pass

    @property
    def in_flight(self) -> int:
        """Calls not finished yet, including those whose caller stopped waiting (timed out)."""
        with self._lock:
            return len(self._calls)

    def __repr__(self) -> str:
        return f"ServerConnection({self.address}{', shm' if self.shm else ''})"


class _Call:
    """One request between ``send`` and the end of its RPC (slots: thousands may wait for their deadline)."""

    __slots__ = ("connection", "model", "request", "outputs", "slots", "region", "future", "deadline", "expired",
                 "started", "finished")

    def __init__(self, connection: ServerConnection, model: str, request: pb.ModelInferRequest, outputs: list[str],
                 slots: list[_OutputSlot], region: Any, future: Future, deadline: float):
        self.connection, self.model, self.request, self.outputs = connection, model, request, outputs
        self.slots, self.region, self.future, self.deadline = slots, region, future, deadline
        self.expired = False  # its caller was failed with DEADLINE_EXCEEDED
        self.started = False  # a worker took it to send it
        self.finished = False  # its RPC ended (or it was never sent)

    def release(self) -> tuple[Future, bool]:
        """Drops what the deadline keeper need not hold until the deadline; the caller's Future and
        whether the deadline already failed it. Called under the connection's lock."""
        future, self.future, self.request, self.region = self.future, None, None, None
        return future, self.expired


class _Deadlines:
    """One thread that fails the callers of every connection whose requests pass ``timeout_s``.

    Calls are kept in a heap by deadline and not removed when they finish (a finished call is skipped
    when it reaches the top), so ``send`` only pushes, and the thread sleeps until the earliest deadline
    of a call still running: with one ``timeout_s`` it wakes about once per ``timeout_s``, not per request.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Call]] = []
        self._cond = threading.Condition(threading.Lock())
        self._order = itertools.count()
        self._pid: int | None = None

    def add(self, call: _Call) -> None:
        with self._cond:
            if self._pid != os.getpid():  # first use (or a forked child, which has no such thread)
                self._pid = os.getpid()
                self._heap.clear()
                threading.Thread(target=self._run, name="sonic-deadlines", daemon=True).start()
            heapq.heappush(self._heap, (call.deadline, next(self._order), call))
            if self._heap[0][2] is call:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._heap:
                        self._cond.wait()
                        continue
                    deadline, _, call = self._heap[0]
                    if call.finished:
                        heapq.heappop(self._heap)
                        continue
                    left = deadline - time.monotonic()
                    if left > 0:
                        self._cond.wait(min(left, 3600.0))
                        continue
                    heapq.heappop(self._heap)
                    break
            try:
                call.connection._expire(call)  # outside the lock: the caller's callbacks run here
            except Exception:  # noqa: BLE001 - this thread serves every connection: it must not die
                log.exception("failing a request at its deadline")


_DEADLINES = _Deadlines()


_said: set[str] = set()


def _say_once(line: str, level: int = logging.INFO) -> None:
    """Logs a notice once per process (one job makes many connections)."""
    if line not in _said:
        _said.add(line)
        log.log(level, line)


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


def _calmer(keepalive: Keepalive, address: str) -> Keepalive:
    """Pings half as often: the server ended a native connection for pinging more often than it allows (gRPC's
    own client does the same). Logged at each step: the server's flags are what should change."""
    slower = Keepalive(min(2 * keepalive.time_s, 3600.0), keepalive.timeout_s)
    _say_once(f"Triton server {address} refuses HTTP/2 pings every {keepalive.time_s:g} s (too_many_pings): pinging "
              f"every {slower.time_s:g} s now; start it with --grpc-http2-min-recv-ping-interval-without-data and "
              "--grpc-keepalive-permit-without-calls=1 (as `sonic server start` does)", logging.WARNING)
    return slower


def _datatypes(info: ModelInfo, inputs: Mapping[str, Any]) -> dict[str, str]:
    """Triton's datatype of each input (``BYTES`` for strings)."""
    types = {spec.name: "BYTES" if spec.datatype == "STRING" else spec.datatype for spec in info.inputs}
    unknown = [name for name in inputs if name not in types]
    if unknown:
        raise RequestError(info.name, "?", "", f"no input {unknown[0]!r}", "fatal")
    return types


def fixed_size(spec: TensorSpec) -> bool:
    """Whether an output's size is known before the answer (no -1 dimension, no strings): only such an output
    can have room reserved in a request's shared memory region; the others always come back in the message."""
    return spec.datatype != "STRING" and not any(d < 0 for d in spec.dims)


def _raw(array: np.ndarray, datatype: str) -> bytes:
    """A tensor's bytes as Triton reads them from ``raw_input_contents`` (C order; strings length-prefixed)."""
    if datatype == "BYTES":
        serialized = serialize_byte_tensor(array)
        return serialized.item() if serialized.size else b""
    return array.tobytes()


def _in_region(parameters: Any, region: str, nbytes: int, offset: int) -> None:
    """Marks a tensor of a request as living in a registered shared memory region."""
    parameters["shared_memory_region"].string_param = region
    parameters["shared_memory_byte_size"].int64_param = nbytes
    parameters["shared_memory_offset"].int64_param = offset
