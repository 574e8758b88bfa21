"""One Triton server as the SONIC client sees it: a gRPC channel, the models it serves, requests to it.

:class:`ServerConnection` sends *one* request (already split and checked by the client) and hands back
a ``concurrent.futures.Future``; it never blocks on the result. Control calls (readiness, configs,
statistics, shared memory registration) use tritonclient's blocking client. Inputs (and outputs of
fixed size) travel through system shared memory when the pool says the server is on this host. Every
error leaves this file as a :class:`~.triton_errors.RequestError` (see ``triton_errors.py``).

A transport carries each ``ModelInferRequest`` built on the caller's thread, behind one protocol
(``transport/__init__.py``): **native** (the default where it builds, ``transport/native.py``: an HTTP/2
client on libnghttp2 whose I/O thread runs without the interpreter lock; a call to a local server costs
about half the process CPU of gRPC's own blocking call, 87 vs 179 µs for ``demo_mlp``, one call at a
time), or **grpcio** (``transport/grpcio.py``: gRPC's blocking call on a few worker threads) for TLS, or
where the native one cannot be built. Both compress requests per model when asked (``compression.py``), and
carry the job's bearer token where it may go (``bearer_token.py``), as the control calls do.

Deadlines stay local (see :class:`ServerConnection`): one keeper thread for all connections
(``calls.py``) fails a caller at ``timeout_s`` while its call runs on.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor, triton_to_np_dtype

from ...errors import ConfigError
from ..compression import Compression
from .bearer_token import BearerToken, TokenPlugin, explain, for_server
from .calls import ORPHAN_LIMIT, Call, CallLedger
from ..keepalive import Keepalive
from ..repository import ModelInfo, TensorSpec, parse_specs
from ..server_spec import ServerSpec
from ..shm import SharedMemoryPool, aligned
from ..tls_probe import certificate_problem, hint, server_tls
from .transport import Transport, native
from .transport.grpcio import GrpcioTransport, channel_options
from ..triton_errors import RequestError, convert

log = logging.getLogger(__name__)

#: in ``shared_memory: auto``, requests smaller than this go in the gRPC message
SHM_MIN_BYTES = 16 * 1024

#: at close, how long to wait for calls still running before the channel (and so they) are closed
CLOSE_GRACE_S = 5.0


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
    the call gets only a safety deadline (10 × ``timeout_s``, 600 s at least: ``transport/grpcio.py``) for a
    server that never answers; on the native transport none at all: its call ends when the server answers
    or the connection ends (a server process that died drops it at once). While ``ORPHAN_LIMIT`` such calls
    are unanswered, new requests fail at once (DEADLINE_EXCEEDED, to be failed over) instead of piling more
    work on a server that is far behind. :meth:`close` waits ``CLOSE_GRACE_S`` for such calls before closing.
    A request not yet sent when its deadline passes (on grpcio, still queued for a worker) is never sent.

    Args:
        spec (ServerSpec): address and TLS settings.
        timeout_s (float): per-request deadline, enforced here: the caller gets DEADLINE_EXCEEDED after
            ``timeout_s`` but the gRPC call is *not* cancelled (see below).
        compression (Compression | str): gRPC message compression of each model's requests ("none", "gzip"
            or "deflate" for every model alike).
        shared_memory (str): "on" (tensors through system shared memory), "off", or "auto": shared
            memory for requests of at least ``SHM_MIN_BYTES`` (below that, copying into the gRPC
            message costs less than the extra bookkeeping). Only with a server that has shown, at the
            connection's probe, that it opens this host's regions; else the wire, after one notice ("on":
            one warning).
        model_versions (dict): pinned model versions (default: the server's choice).
        transport (str): "auto" (the compiled transport for servers reached in clear text, where it
            builds; else grpcio), "native" (an error where it cannot be used) or "grpcio" (see the module
            docstring).
        keepalive (Keepalive | None): HTTP/2 pings on every channel of this connection, so a silent one (a
            network partition) ends in seconds, failing its calls with UNAVAILABLE (``keepalive.py``).
        token (BearerToken | None): the job's bearer token, sent with every call (data and control) where it
            may go: over TLS or to loopback (``bearer_token.py``).
    """

    def __init__(self, spec: ServerSpec, timeout_s: float = 60.0, compression: Compression | str = "none",
                 shared_memory: str = "off", model_versions: Mapping[str, int] | None = None,
                 transport: str = "auto", keepalive: Keepalive | None = None, token: BearerToken | None = None):
        self.spec = spec
        self.keepalive = keepalive or Keepalive()
        self.address = spec.address
        self.timeout_s = timeout_s
        self.compression = Compression.of(compression)
        self.model_versions = {k: str(v) for k, v in (model_versions or {}).items()}
        #: ``{model: "STATE: reason"}`` of models the server lists but cannot serve, from the last probe
        self.unavailable: dict[str, str] = {}
        self.client = grpcclient.InferenceServerClient(spec.address, ssl=spec.ssl,
                                                       root_certificates=spec.root_certificates,
                                                       private_key=spec.private_key,
                                                       certificate_chain=spec.certificate_chain,
                                                       channel_args=channel_options(self.keepalive))
        self.token, self._withheld = for_server(token, spec)  # why it is not sent, if it is not
        if self.token is not None:
            self.client.register_plugin(TokenPlugin(self.token))
        self.shm = (SharedMemoryPool(self.client, spec.address, forced=shared_memory == "on")
                    if shared_memory in ("on", "auto") else None)
        self.shm_min_bytes = SHM_MIN_BYTES if shared_memory == "auto" else 0
        self._calls = CallLedger(spec.address, timeout_s, self._ended)
        self._transport = self._open_transport(transport)

    @property
    def transport(self) -> str:
        """"native" or "grpcio": what carries this connection's requests."""
        return self._transport.name

    @property
    def orphaned(self) -> int:
        """Requests that timed out locally and were left to finish."""
        return self._calls.orphaned

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
            error = self._convert(err, "*")
            closed = error.status == "UNAVAILABLE" and "socket closed" in str(error).lower()  # all gRPC says
            why = hint(server_tls(self.address), self.spec.ssl, bool(self.spec.certificate_chain)) if closed else None
            if why is None and self.spec.ssl and error.status == "UNAVAILABLE":  # gRPC: "Socket closed", or OpenSSL
                why = certificate_problem(self.address, self.spec.root_certificates, self.spec.private_key,
                                          self.spec.certificate_chain)
            raise (RequestError("*", self.address, "UNAVAILABLE", why, "failover") if why else error) from None
        if self.shm is not None:  # proven now, before the first request that would use it (shm.py)
            self.shm.usable(timeout)
        ready = {m.name: m.version for m in index.models if m.state == "READY"}
        # what the index says of the models it lists but cannot serve (a load that failed, an unloaded model)
        self.unavailable = {m.name: f"{m.state or 'UNAVAILABLE'}: {m.reason}" if m.reason else m.state or "UNAVAILABLE"
                            for m in index.models if m.name not in ready}
        return ready

    def ready_versions(self, model: str, timeout: float = 5.0) -> list[str]:
        """The versions of ``model`` ready on the server: several while a fleet rolls a new one in beside the
        old one (``version_pins.py`` pins the job's)."""
        try:
            index = self.client.get_model_repository_index(client_timeout=timeout)
        except Exception as err:  # noqa: BLE001 - converted at this boundary
            raise self._convert(err, model) from None
        return [m.version for m in index.models if m.name == model and m.state == "READY"]

    def model_info(self, model: str, version: str = "") -> ModelInfo:
        """The model's config as the server has it (inputs, outputs, dims, max_batch_size)."""
        try:
            response = self.client.get_model_config(model, self.model_versions.get(model, ""), client_timeout=10)
        except Exception as err:  # noqa: BLE001
            raise self._convert(err, model) from None
        config = response.config
        return ModelInfo(name=model, path=None, config=config, version=int(version or 0) if str(version).isdigit() else 0,
                         inputs=parse_specs(config.input), outputs=parse_specs(config.output))

    def statistics(self, model: str = "") -> dict[tuple[str, str], dict[str, float]]:
        """Cumulative server-side counters per ``(model, version)`` (all models when ``model`` is "")."""
        try:
            response = self.client.get_inference_statistics(model, client_timeout=5)
        except Exception as err:  # noqa: BLE001
            raise self._convert(err, model or "*") from None
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
        may reuse its arrays at once; the transport carries it and the Future completes when its call
        ends, or the deadline keeper (``calls.py``) fails it after ``timeout_s``.
        """
        future: Future = Future()
        region = None
        try:
            orphans = self._calls.orphans
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
            future.set_exception(self._convert(err, info.name))
            return future
        self._transport.send(self._calls.open(info.name, request, outputs, slots, region, future,
                                              self.compression.for_model(info.name)))
        return future

    def _ended(self, call: Call, answer: pb.ModelInferResponse | None, error: BaseException | None) -> None:
        """A call ended (on a transport's thread): its outputs read, its region released, its caller told."""
        values = None
        if error is None and answer is not None:
            try:
                values = self._read(call, answer)
            except Exception as err:  # noqa: BLE001 - converted below
                error = err
        if error is not None:  # every error of a call crosses this one boundary
            error = self._convert(error, call.model)
        if call.region is not None:  # only now: the server may write into it until the call ends
            self.shm.release(call.region)
        self._calls.finish(call, values, error)

    def _convert(self, err: BaseException, model: str) -> RequestError:
        """The one boundary (``triton_errors.convert``), a refused identity told with what to fix here."""
        return explain(convert(err, model, self.address), self.token, self._withheld)

    def _read(self, call: Call, response: pb.ModelInferResponse) -> dict[str, np.ndarray]:
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

    # -- the transport ----------------------------------------------------------------------------------
    def _open_transport(self, asked: str) -> Transport:
        """The transport :meth:`_choose_transport` picks (opened lazily: no channel before the first call)."""
        if self._choose_transport(asked) == "native":
            return native.NativeTransport(self.address, self.keepalive, self.token)
        return GrpcioTransport(self.spec, self.timeout_s, self.keepalive, self.token)

    def _choose_transport(self, asked: str) -> str:
        """"native" or "grpcio" for ``asked`` (see the class docstring); says once why native is not used."""
        if asked not in ("auto", "native", "grpcio"):
            raise ConfigError(f"transport must be auto, native or grpcio, not {asked!r}",
                              key="services.inference.transport")
        if asked == "grpcio":
            return asked
        reason = "it speaks clear text only (this server uses TLS)" if self.spec.ssl else None
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
        region that is gone. Requests still queued then are failed (CANCELLED) and never sent. A later
        request opens the channel again.
        """
        self._calls.wait_idle(grace_s)
        self._calls.cancel_unsent()
        self._transport.close()
        if self.shm is not None:
            self.shm.close()
        try:
            self.client.close()
        except Exception:  # noqa: BLE001
            pass

    @property
    def in_flight(self) -> int:
        """Calls not finished yet, including those whose caller stopped waiting (timed out)."""
        return self._calls.in_flight

    def __repr__(self) -> str:
        return f"ServerConnection({self.address}{', shm' if self.shm else ''})"


_said: set[str] = set()


def _say_once(line: str, level: int = logging.INFO) -> None:
    """Logs a notice once per process (one job makes many connections)."""
    if line not in _said:
        _said.add(line)
        log.log(level, line)


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
