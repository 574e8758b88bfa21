"""One Triton server as the SONIC client sees it: a gRPC channel, the models it serves, requests to it.

:class:`ServerConnection` sends *one* request (already split and checked by the client) with
tritonclient's ``grpc.aio`` API on the framework's asyncio loop and hands back a
``concurrent.futures.Future``; it never blocks on the result. Control calls (readiness, configs,
statistics, shared memory registration) use the blocking client. Inputs (and outputs of fixed size) travel through system shared memory when the pool says
the server is on this host. Every error leaves this file as a
:class:`~.triton_errors.RequestError` (see ``triton_errors.py``).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.utils.shared_memory as shm

from ..errors import ConfigError
from ..futures import background_loop
from .repository import ModelInfo, parse_specs
from .shm import SharedMemoryPool, aligned
from .tls_probe import hint, server_tls
from .triton_errors import ACTIONS, RequestError, convert

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
    end and the answer is dropped; its shared memory region is reused only after that end. gRPC
    itself gets only a safety deadline (``ORPHAN_DEADLINE_S``, or 10 × ``timeout_s``) for a server
    that never answers. While ``ORPHAN_LIMIT`` such calls are unanswered, new requests fail at once
    (DEADLINE_EXCEEDED, to be failed over) instead of piling more work on a server that is far
    behind. :meth:`close` waits ``CLOSE_GRACE_S`` for such calls before closing.

    Args:
        spec (ServerSpec): address and TLS settings.
        timeout_s (float): per-request deadline, enforced here: the caller gets DEADLINE_EXCEEDED after
            ``timeout_s`` but the gRPC call is *not* cancelled (see below).
        compression (str): "none", "gzip" or "deflate" (gRPC message compression).
        shared_memory (str): "on" (tensors through system shared memory), "off", or "auto": shared
            memory for requests of at least ``SHM_MIN_BYTES`` (below that, copying into the gRPC
            message costs less than the extra bookkeeping). Only for a server on this host.
        model_versions (dict): pinned model versions (default: the server's choice).
    """

    def __init__(self, spec: ServerSpec, timeout_s: float = 60.0, compression: str = "none",
                 shared_memory: str = "off", model_versions: Mapping[str, int] | None = None):
        self.spec = spec
        self.address = spec.address
        self.timeout_s = timeout_s
        self.compression = None if compression == "none" else compression
        self.model_versions = {k: str(v) for k, v in (model_versions or {}).items()}
        self.client = grpcclient.InferenceServerClient(spec.address, ssl=spec.ssl,
                                                       root_certificates=spec.root_certificates,
                                                       private_key=spec.private_key,
                                                       certificate_chain=spec.certificate_chain)
        self.shm = SharedMemoryPool(self.client, spec.address) if shared_memory in ("on", "auto") else None
        self.shm_min_bytes = SHM_MIN_BYTES if shared_memory == "auto" else 0
        self._aio_client: grpcaio.InferenceServerClient | None = None
        self._calls: set[asyncio.Future] = set()  # RPCs not finished, touched on the asyncio loop only
        self._orphans: set[asyncio.Future] = set()  # those of them whose caller timed out
        self.orphaned = 0  # requests that timed out locally and were left to finish

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
            raise (RequestError("*", self.address, "UNAVAILABLE", why, "failover") if why else error) from None
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
    def send(self, info: ModelInfo, inputs: Mapping[str, np.ndarray], outputs: list[str]) -> Future:
        """Starts one request; the Future gives ``{output: array}`` or fails with a RequestError.

        The tensors are staged on the caller's thread (so the caller may reuse its arrays at once);
        the gRPC call runs on the framework's asyncio loop (``grpc.aio``), which costs the caller
        tens of microseconds where the callback API's thread start per idle channel cost a millisecond.
        """
        region = None
        try:
            infer_inputs: list = []
            requested: list = []
            slots: list[_OutputSlot] = []
            if self.shm is not None and sum(a.nbytes for a in inputs.values()) >= self.shm_min_bytes:
                region, slots = self._stage(info, inputs, outputs, infer_inputs, requested)
            else:
                for name, array in inputs.items():
                    tensor = grpcclient.InferInput(name, array.shape, _datatype(info, name))
                    tensor.set_data_from_numpy(np.ascontiguousarray(array))
                    infer_inputs.append(tensor)
                requested = [grpcclient.InferRequestedOutput(name) for name in outputs]
        except Exception as err:  # noqa: BLE001 - a failure to send is reported like a failed request
            if region is not None:
                self.shm.release(region)
            future: Future = Future()
            future.set_exception(convert(err, info.name, self.address))
            return future
        return asyncio.run_coroutine_threadsafe(self._infer(info, infer_inputs, requested, outputs, slots, region),
                                                background_loop())

    async def _infer(self, info: ModelInfo, infer_inputs: list, requested: list, outputs: list[str],
                     slots: list[_OutputSlot], region: Any) -> dict[str, np.ndarray]:
        """Waits at most ``timeout_s`` for the call, which is never cancelled (see the class docstring)."""
        if len(self._orphans) >= ORPHAN_LIMIT:  # the server is far behind: do not pile more work on it
            if region is not None:
                self.shm.release(region)
            raise RequestError(info.name, self.address, "DEADLINE_EXCEEDED",
                               f"{len(self._orphans)} earlier requests timed out and are still unanswered; "
                               "not sending more to this server", "failover")
        call = asyncio.ensure_future(self._call(info, infer_inputs, requested, outputs, slots, region))
        self._calls.add(call)
        call.add_done_callback(self._forget)
        try:
            return await asyncio.wait_for(asyncio.shield(call), self.timeout_s)
        except asyncio.TimeoutError:
            self.orphaned += 1
            if not call.done():
                self._orphans.add(call)
            raise RequestError(info.name, self.address, "DEADLINE_EXCEEDED",
                               f"no answer within {self.timeout_s:g} s (the request was left to finish on the "
                               "server; its answer will be dropped)", ACTIONS["DEADLINE_EXCEEDED"]) from None

    def _forget(self, call: asyncio.Future) -> None:
        """Drops a finished call; its outcome, if nobody waited for it any more, is dropped with it."""
        self._calls.discard(call)
        self._orphans.discard(call)
        if not call.cancelled():
            call.exception()  # retrieved, so asyncio does not log an orphan's failure as "never retrieved"

    async def _call(self, info: ModelInfo, infer_inputs: list, requested: list, outputs: list[str],
                    slots: list[_OutputSlot], region: Any) -> dict[str, np.ndarray]:
        """The RPC itself, run to its end; the region is given back only then (the server may still write it)."""
        try:
            result = await (await self._aio()).infer(
                info.name, infer_inputs, model_version=self.model_versions.get(info.name, ""), outputs=requested,
                client_timeout=max(ORPHAN_DEADLINE_S, 10 * self.timeout_s), compression_algorithm=self.compression)
            values = {}
            by_name = {slot.name: slot for slot in slots}
            for name in outputs:
                slot = by_name.get(name)
                if slot is None:
                    values[name] = result.as_numpy(name)
                else:
                    shape = list(result.get_output(name).shape)
                    values[name] = np.array(shm.get_contents_as_numpy(region.handle, slot.dtype, shape, slot.offset))
            return values
        except Exception as err:  # noqa: BLE001 - converted at this boundary
            raise convert(err, info.name, self.address) from None
        finally:
            if region is not None:
                self.shm.release(region)

    async def _aio(self) -> grpcaio.InferenceServerClient:
        """The asyncio channel, created on the loop that uses it."""
        if self._aio_client is None:
            spec = self.spec
            self._aio_client = grpcaio.InferenceServerClient(spec.address, ssl=spec.ssl,
                                                             root_certificates=spec.root_certificates,
                                                             private_key=spec.private_key,
                                                             certificate_chain=spec.certificate_chain)
        return self._aio_client

    def _stage(self, info: ModelInfo, inputs: Mapping[str, np.ndarray], outputs: list[str], infer_inputs: list,
               requested: list) -> tuple[Any, list[_OutputSlot]]:
        """Puts the inputs into one borrowed region and reserves room there for fixed-size outputs."""
        batch = next(iter(inputs.values())).shape[0] if info.max_batch_size > 0 else None
        specs = {spec.name: spec for spec in info.outputs}
        sizes = []
        for name in outputs:
            dims = specs[name].dims
            if any(d < 0 for d in dims) or specs[name].datatype == "STRING":
                sizes.append(None)  # size unknown before the answer: comes back in the message
                continue
            shape = ([batch] if batch is not None else []) + list(dims)
            sizes.append(math.prod(shape) * specs[name].dtype.itemsize)
        arrays = {name: np.ascontiguousarray(array) for name, array in inputs.items()}
        total = sum(aligned(a.nbytes) for a in arrays.values()) + sum(aligned(s) for s in sizes if s)
        region = self.shm.acquire(total)
        offset = 0
        for name, array in arrays.items():
            shm.set_shared_memory_region(region.handle, [array], offset)
            tensor = grpcclient.InferInput(name, array.shape, _datatype(info, name))
            tensor.set_shared_memory(region.name, array.nbytes, offset)
            infer_inputs.append(tensor)
            offset += aligned(array.nbytes)
        slots = []
        for name, size in zip(outputs, sizes):
            out = grpcclient.InferRequestedOutput(name)
            if size:
                out.set_shared_memory(region.name, size, offset)
                slots.append(_OutputSlot(name, specs[name].dtype, offset))
                offset += aligned(size)
            requested.append(out)
        return region, slots

    def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """Waits up to ``grace_s`` for calls still running (timed-out ones included), then closes.

        Closing the channel cancels whatever still runs, which is what may crash Triton 2.51, and the
        shared memory regions are unregistered only after that, so the server never writes into a
        region that is gone.
        """
        try:
            if self._aio_client is not None:
                asyncio.run_coroutine_threadsafe(self._close_aio(grace_s), background_loop()).result(grace_s + 5)
        except Exception:  # noqa: BLE001 - closing a channel to a dead server
            pass
        if self.shm is not None:
            self.shm.close()
        try:
            self.client.close()
        except Exception:  # noqa: BLE001
            pass

    async def _close_aio(self, grace_s: float) -> None:
        if self._calls:
            await asyncio.wait(set(self._calls), timeout=grace_s)
        client, self._aio_client = self._aio_client, None
        if client is not None:
            await client.close()

    @property
    def in_flight(self) -> int:
        """Calls not finished yet, including those whose caller stopped waiting (timed out)."""
        return len(self._calls)

    def __repr__(self) -> str:
        return f"ServerConnection({self.address}{', shm' if self.shm else ''})"


def _datatype(info: ModelInfo, name: str) -> str:
    for spec in info.inputs:
        if spec.name == name:
            return "BYTES" if spec.datatype == "STRING" else spec.datatype
    raise RequestError(info.name, "?", "", f"no input {name!r}", "fatal")

