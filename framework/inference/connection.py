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
from .triton_errors import RequestError, convert

log = logging.getLogger(__name__)

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}

#: in ``shared_memory: auto``, requests smaller than this go in the gRPC message
SHM_MIN_BYTES = 16 * 1024


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

    Args:
        spec (ServerSpec): address and TLS settings.
        timeout_s (float): per-request deadline (gRPC ``client_timeout``).
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
            raise convert(err, "*", self.address) from None
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
        try:
            result = await (await self._aio()).infer(
                info.name, infer_inputs, model_version=self.model_versions.get(info.name, ""), outputs=requested,
                client_timeout=self.timeout_s, compression_algorithm=self.compression)
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

    def close(self) -> None:
        if self.shm is not None:
            self.shm.close()
        try:
            self.client.close()
            if self._aio_client is not None:
                asyncio.run_coroutine_threadsafe(self._aio_client.close(), background_loop()).result(5)
        except Exception:  # noqa: BLE001 - closing a channel to a dead server
            pass

    def __repr__(self) -> str:
        return f"ServerConnection({self.address}{', shm' if self.shm else ''})"


def _datatype(info: ModelInfo, name: str) -> str:
    for spec in info.inputs:
        if spec.name == name:
            return "BYTES" if spec.datatype == "STRING" else spec.datatype
    raise RequestError(info.name, "?", "", f"no input {name!r}", "fatal")

