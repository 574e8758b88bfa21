"""EmTrkMichelId on a GPU: a Triton python-backend model running torch, weights from the ONNX file.

The GPU machine's onnxruntime has no CUDA provider (onnxruntime-gpu is too large to ship), so this
repository entry serves the *same* ``model.onnx`` as ``data/models/protodune`` (``1/model.onnx`` here
is a link to it, and config.pbtxt pins its MD5) by rebuilding the network in torch from the ONNX
initialisers: the int8 Dense-128 matrix is dequantised exactly as ``DequantizeLinear`` does, then
cast to the compute precision (``parameters { key: "precision" }``: float16 on GPUs, float32 on CPU).

Interface, identical to the ONNX model: ``patches`` uint8 ``[batch, 48, 48, 1]`` → ``em_trk_none``
float32 ``[batch, 3]``, ``michel`` float32 ``[batch, 1]``.

Where the time goes, and what this file does about it (``sonic bench gpu`` measures each part; the
numbers below are from an H100 with 16 Xeon cores, ~41k patches per event, float16):

* **Memory traffic of one activation.** The 5×5 convolution turns each 2.3 kB patch into a
  48×44×44 activation (186 kB in float16) that the first Dense layer reads back: per event that is
  ~8 GB written and read, which bounds the network far more than its ~1.3 TFLOP. So the convolution
  runs channels-last (``layout: nhwc``): its output is then already in the order the Dense layer
  reads, flattening is a view, and the Dense matrix's rows are permuted once at load instead of the
  activation on every call. Bias and ReLU run inside the cuDNN convolution where torch offers it
  (``torch.cudnn_convolution_relu``; ``fuse: false`` turns it off), which saves two more passes over
  that activation. Network time per event: 57 ms channel-first with a separate ReLU, 32 ms
  channels-last, 15 ms channels-last and fused.
* **Host to device.** Patches cross as 1 byte per pixel and are widened on the device. Inside
  Triton's python stub the inputs already lie in the stub's shared-memory pool, so that pool is
  page-locked where it lies, once per mapping (``staging: registered``, the default), and the
  inputs go to the device by DMA: host→device fell from 30 to 19 ms of instance time per event
  against copying from ordinary (pageable) memory, and the python backend's overhead from 12 to
  7 ms (64.1 vs 62.9 events/s, 8 instances, one run). Gathering them into a page-locked buffer of
  our own first (``staging: pinned``, what the in-process path does: 4.6–7.3 ms per event for the
  copy against 12–22 ms from ordinary memory there) costs one more host copy of every input in the
  server, which measured worse (43–44 vs 47–49 events/s with 4 instances, pageable).
* **Python per execution.** Triton's dynamic batcher hands over several requests at once
  (``max_batch_size`` well above the clients' 1693-patch requests): one forward pass and one copy
  each way per execution, however many requests it holds (~9 per execution at saturation).
* **Host threads.** A GPU instance sets torch to one CPU thread: it only copies on the host, and
  torch's default of a thread per core in every instance competes with Triton's own threads.
  Threads waiting for the device sleep instead of spinning (``sync: blocking``, see
  :func:`schedule_host_waits`): host cores busy at saturation fell from 11.4 to 7.0 of 16 in the
  server and from 15.5 to 12.5 with 8 direct processes, at the same events/s (H200, one run each).
* **Instances.** Triton hands each instance its inputs only after copying them on the host (~22 ms
  of instance time per event), so more instances keep the GPU fed while some copy: with 16 clients
  8, 12 and 16 instances gave 63, 67.5 and 68.7 events/s (H100, chunk 16384, two runs each).
* ``chunk`` (parameter) bounds the patches per forward pass, and so the device memory an
  instance needs (~0.19 MB per patch): 16384 (the entry's) is one pass per merged execution;
  direct processes gained ~5 % over 4096.

Tensors pass through DLPack in both directions, so the stub's numpy version does not matter (with
numpy 2, ``pb_utils.Tensor(name, ndarray)`` outputs come back empty). ``SONIC_STAGE_LOG=<file>`` in
the server's environment makes each execution append one JSON line with its stage times (the
benchmark's breakdown); it synchronises the device between stages, so it is off by default.

Outside Triton (tests, in-process GPU timing) import this file and use :class:`EmTrkMichelIdTorch`.
Only torch, onnx and numpy are imported: the file runs in the stub's interpreter, not sonic-hep's.
"""

from __future__ import annotations

import ctypes
import json
import os
import time
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper
from torch.utils import dlpack

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside the Triton stub
    pb_utils = None

WEIGHTS = ("conv_w", "conv_b", "dense1_w", "dense1_b", "dense2_w", "dense2_b", "em_w", "em_b", "michel_w", "michel_b")
LAYOUTS = ("nchw", "nhwc")
STAGINGS = ("registered", "pageable", "pinned")
# patches per forward pass at most on a CPU (the fallback server), whatever ``chunk`` says for GPUs
CPU_CHUNK = 1024
# how a host thread waits for the device: CUDA driver context flags CU_CTX_SCHED_SPIN / _BLOCKING_SYNC
SYNCS = {"spin": 0x01, "blocking": 0x04}


def schedule_host_waits(device: torch.device, how: str, driver: object = None) -> str | None:
    """Makes this process's host threads wait for ``device`` by spinning or by sleeping on the driver
    (``sync`` parameter; the default ``blocking``). CUDA's default makes a process with fewer
    contexts than the machine has cores spin a core for every waiting thread: on a GPU node, eight
    server instances (or direct processes) waiting on a busy GPU would spin eight cores away from
    Triton's input copies, the clients and the rest of the job. Must
    run before the device's context is first used; returns None, or why it could not be set
    (the default then stays: nothing but speed depends on it). ``driver``: the CUDA driver library
    (default: loaded here)."""
    if how not in SYNCS:
        raise ValueError(f"parameter sync {how!r}: expected one of {tuple(SYNCS)}")
    if driver is None:
        try:
            driver = ctypes.CDLL("libcuda.so.1")
        except OSError as err:
            return f"no CUDA driver library: {err}"
    ordinal, handle = ctypes.c_int(device.index or 0), ctypes.c_int()
    for call, arguments in (("cuInit", (ctypes.c_uint(0),)), ("cuDeviceGet", (ctypes.byref(handle), ordinal)),
                            ("cuDevicePrimaryCtxSetFlags", (handle, ctypes.c_uint(SYNCS[how])))):
        status = getattr(driver, call)(*arguments)
        if status != 0:
            return f"{call}: CUDA driver error {status}"
    return None


def onnx_weights(path: str | Path) -> dict[str, np.ndarray]:
    """float32 weights of the EmTrkMichelId ONNX file (Dense matrices ``[in, out]``, int8 dequantised)."""
    arrays = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    if "dense1_w_int8" in arrays:
        arrays["dense1_w"] = arrays["dense1_w_int8"].astype(np.float32) * arrays["dense1_w_scale"][None, :]
    return {name: arrays[name].astype(np.float32) for name in WEIGHTS}


def channels_last_rows(dense1_w: np.ndarray, channels: int) -> np.ndarray:
    """The first Dense matrix (``[C·H·W, out]``, rows in the ONNX graph's channel-first flattening)
    with its rows reordered to channel-last flattening (``H·W·C``), so that a channels-last
    activation can be fed to it as it lies in memory."""
    size = int(round((dense1_w.shape[0] // channels) ** 0.5))
    return dense1_w.reshape(channels, size, size, -1).transpose(1, 2, 0, 3).reshape(dense1_w.shape)


class EmTrkMichelIdTorch(torch.nn.Module):
    """The inference network (no dropout) with fixed weights, in ``dtype`` on ``device``.

    Args:
        weights: :func:`onnx_weights`.
        device, dtype: where and in which precision it computes (outputs are float32 either way).
        layout (str): "nhwc" (channels-last convolution, the default on CUDA) or "nchw" (the ONNX
            graph's own order, the default on CPU, where channels-last gains nothing).
        chunk (int): at most this many patches per forward pass (0: all at once), which bounds the
            device memory an execution needs: ~0.2 MB per patch in float16.
    """

    def __init__(self, weights: dict[str, np.ndarray], device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, layout: str | None = None, chunk: int = 0, fuse: bool = True):
        super().__init__()
        device = torch.device(device)
        self.dtype, self.chunk = dtype, int(chunk)
        self.layout = layout or ("nhwc" if device.type == "cuda" else "nchw")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout {self.layout!r}: expected one of {LAYOUTS}")

        def tensor(value: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(value)).to(device=device, dtype=dtype)

        self.conv_w, self.conv_b = tensor(weights["conv_w"]), tensor(weights["conv_b"])
        dense1 = weights["dense1_w"]
        if self.layout == "nhwc":
            self.conv_w = self.conv_w.contiguous(memory_format=torch.channels_last)
            dense1 = channels_last_rows(dense1, weights["conv_w"].shape[0])
        # F.linear takes [out, in]
        self.dense = [(tensor(w.T), tensor(weights[f"{n}_b"])) for n, w in
                      (("dense1", dense1), ("dense2", weights["dense2_w"]), ("em", weights["em_w"]),
                       ("michel", weights["michel_w"]))]
        # bias and ReLU inside cuDNN's convolution: one pass over the large activation instead of three
        self.fused = fuse and device.type == "cuda" and hasattr(torch, "cudnn_convolution_relu")

    @classmethod
    def from_onnx(cls, path: str | Path, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                  layout: str | None = None, chunk: int = 0, fuse: bool = True) -> EmTrkMichelIdTorch:
        return cls(onnx_weights(path), device, dtype, layout, chunk, fuse)

    # the stages of one forward pass, separately callable so that a benchmark can time each
    def widen(self, codes: torch.Tensor) -> torch.Tensor:
        """uint8 ``[N, 48, 48, 1]`` → ``[N, 1, 48, 48]`` in the compute precision, scaled to [0, 1]
        (with one channel, this view is both NCHW and NHWC)."""
        x = codes.permute(0, 3, 1, 2).to(self.dtype).mul_(1.0 / 255.0)
        return x.contiguous(memory_format=torch.channels_last) if self.layout == "nhwc" else x

    def convolve(self, x: torch.Tensor) -> torch.Tensor:
        """ReLU(convolution), flattened in the order the first Dense matrix expects."""
        if self.fused:
            x = torch.cudnn_convolution_relu(x, self.conv_w, self.conv_b, (1, 1), (0, 0), (1, 1), 1)
        else:
            x = F.relu_(F.conv2d(x, self.conv_w, self.conv_b))
        return x.permute(0, 2, 3, 1).flatten(1) if self.layout == "nhwc" else x.flatten(1)

    def dense1(self, features: torch.Tensor) -> torch.Tensor:
        w1, b1 = self.dense[0]
        return F.relu_(F.linear(features, w1, b1))

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        (w2, b2), (we, be), (wm, bm) = self.dense[1:]
        x = F.relu_(F.linear(x, w2, b2))
        return torch.softmax(F.linear(x, we, be).float(), dim=-1), torch.sigmoid(F.linear(x, wm, bm).float())

    def _forward(self, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.heads(self.dense1(self.convolve(self.widen(codes))))

    @torch.inference_mode()
    def forward(self, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 ``[N, 48, 48, 1]`` (on the model's device) → (``em_trk_none`` [N, 3], ``michel`` [N, 1]), float32."""
        if not self.chunk or len(codes) <= self.chunk:
            return self._forward(codes)
        parts = [self._forward(codes[i:i + self.chunk]) for i in range(0, len(codes), self.chunk)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


class PinnedStaging:
    """One page-locked host buffer, grown on demand and reused, through which an execution's
    requests reach the device in one asynchronous copy (see the module docstring)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.host = torch.empty(0, dtype=torch.uint8, pin_memory=True)

    @torch.inference_mode()  # the buffer is allocated and filled in one mode, whatever the caller's
    def to_device(self, parts: list[torch.Tensor]) -> torch.Tensor:
        """The concatenation of ``parts`` (uint8 CPU tensors of equal trailing shape) on the device."""
        rows = sum(len(p) for p in parts)
        shape = (rows, *parts[0].shape[1:])
        size = int(np.prod(shape))
        # the previous copy out of the buffer must be done before it is refilled or replaced
        torch.cuda.current_stream(self.device).synchronize()
        if self.host.numel() < size:
            self.host = torch.empty(int(size * 1.25), dtype=torch.uint8, pin_memory=True)
        staged = self.host[:size].view(shape)
        offset = 0
        for part in parts:
            staged[offset:offset + len(part)].copy_(part)
            offset += len(part)
        return staged.to(self.device, non_blocking=True)


def shared_memory_mappings(maps: str = "/proc/self/maps") -> list[tuple[int, int]]:
    """(start, end) addresses of this process's mappings of files in /dev/shm: in a Triton python
    stub, the pool its inputs are copied into."""
    ranges = []
    with open(maps) as stream:
        for line in stream:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/dev/shm/"):
                start, end = (int(x, 16) for x in fields[0].split("-"))
                ranges.append((start, end))
    return ranges


class RegisteredPool:
    """Page-locks the stub's shared-memory pool where it lies (``cudaHostRegister``), once per mapping,
    so that inputs lying in it reach the device by DMA, with neither the driver's staging copy of
    ordinary memory nor one of our own on the host. Where registration fails (or an input lies
    elsewhere) the copy is the ordinary one: nothing but speed depends on it."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] = []
        self.failed: str | None = None

    def covers(self, tensor: torch.Tensor) -> bool:
        start = tensor.data_ptr()
        end = start + tensor.numel() * tensor.element_size()
        return any(a <= start and end <= b for a, b in self.ranges)

    def register(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` now lies in page-locked memory (registering new pool mappings if needed)."""
        if self.failed is not None or self.covers(tensor):
            return self.failed is None and self.covers(tensor)
        cudart = torch.cuda.cudart()
        for start, end in shared_memory_mappings():
            if (start, end) in self.ranges:
                continue
            error = cudart.cudaHostRegister(start, end - start, 0)
            if int(error) != 0:
                self.failed = f"cudaHostRegister of {end - start} bytes: CUDA error {int(error)}"
                return False
            self.ranges.append((start, end))
        return self.covers(tensor)

    def release(self) -> None:
        cudart = torch.cuda.cudart()
        for start, _ in self.ranges:
            cudart.cudaHostUnregister(start)
        self.ranges = []


def _parameter(config: dict, key: str, default: str) -> str:
    return config.get("parameters", {}).get(key, {}).get("string_value", default)


def network_from_config(path: str | Path, device: torch.device | str, config: dict,
                        **overrides: object) -> EmTrkMichelIdTorch:
    """The network as a model config's ``parameters`` describe it (``precision``, ``layout``,
    ``chunk``, ``fuse``, and ``sync`` for the process's waits on the device; ``overrides`` win), on
    ``device``: one reading of them for a server instance and for in-process use, so that both run
    the same network. On a CPU it computes in float32 (half precision convolutions are slow or
    missing on CPUs). Call it before anything else uses the device, so that ``sync`` takes effect."""
    device = torch.device(device)

    def value(key: str, default: str) -> str:
        return str(overrides[key]) if key in overrides else _parameter(config, key, default)

    if device.type == "cuda":
        sync = value("sync", "blocking")
        problem = schedule_host_waits(device, sync)
        if problem:
            print(f"EmTrkMichelId: sync {sync!r} not set ({problem})", flush=True)
    half = device.type == "cuda" and value("precision", "float16") == "float16"
    chunk = int(value("chunk", "0"))
    if device.type == "cpu":  # float32 activations: 0.37 MB a patch, and no speed to gain from long passes
        chunk = min(chunk or CPU_CHUNK, CPU_CHUNK)
    return EmTrkMichelIdTorch.from_onnx(path, device, torch.float16 if half else torch.float32,
                                        value("layout", "") or None, chunk, value("fuse", "true").lower() != "false")


class TritonPythonModel:
    """One model instance: the network on the instance's device."""

    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.name = config["name"]
        if args.get("model_instance_kind") == "GPU":
            self.device = torch.device(f"cuda:{int(args.get('model_instance_device_id') or 0)}")
            # merged batches come in many sizes, and the caching allocator's fragments of them grew one
            # instance to 10.7 GB in a 16384-patch run; growable segments keep it near its working set
            # (read at the first device allocation, below; an operator's own setting wins)
            os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
            # the host only copies here: torch's default of one thread per core in every instance
            # competes with Triton's own threads and the other instances for the cores
            torch.set_num_threads(1)
            # no cudnn.benchmark: it autotunes every new batch size (each event's last request, each
            # dynamically batched total), which costs far more than it gains here
        else:  # the CPU fallback server
            self.device = torch.device("cpu")
        path = Path(args["model_repository"]) / args["model_version"] / "model.onnx"
        self.net = network_from_config(path, self.device, config)  # first use of the device (see ``sync``)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        staging = _parameter(config, "staging", "registered")
        if staging not in STAGINGS:
            raise ValueError(f"parameter staging {staging!r}: expected one of {STAGINGS}")
        cuda = self.device.type == "cuda"
        self.staging = PinnedStaging(self.device) if cuda and staging == "pinned" else None
        self.pool = RegisteredPool() if cuda and staging == "registered" else None
        self.stage_log = os.environ.get("SONIC_STAGE_LOG")
        self.net(torch.zeros((8, 48, 48, 1), dtype=torch.uint8, device=self.device))  # load kernels now

    def _to_device(self, requests: list) -> tuple[torch.Tensor, list[int]]:
        parts = [dlpack.from_dlpack(pb_utils.get_input_tensor_by_name(r, "patches").to_dlpack()) for r in requests]
        sizes = [len(p) for p in parts]
        self._inputs_at = time.time()
        if self.staging is not None and all(p.device.type == "cpu" for p in parts):
            return self.staging.to_device(parts), sizes
        if self.pool is not None:
            for part in parts:
                self.pool.register(part)
        # each request's patches go to the device on their own and are concatenated there: a
        # torch.cat of the stub's shared-memory tensors on the host costs ~6× the forward pass
        codes = [p.to(self.device, non_blocking=True) for p in parts]
        return (torch.cat(codes) if len(codes) > 1 else codes[0]), sizes

    def _synchronize(self) -> float:
        """The time once the device is done (stage log only: it stalls the pipeline)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.time()

    def execute(self, requests: list) -> list:
        """One forward pass for all requests handed over together; one response per request, in order."""
        try:
            times = [time.time()]
            codes, sizes = self._to_device(requests)
            if self.stage_log:
                times.append(self._synchronize())
            em, michel = self.net(codes)
            if self.stage_log:
                times.append(self._synchronize())
            em, michel = em.cpu(), michel.cpu()
        except Exception as err:  # noqa: BLE001 - reported per request, the server keeps running
            if len(requests) > 1:  # one bad request must not fail those handed over with it: one by one
                return [self.execute([request])[0] for request in requests]
            # a TritonError of its own per response: an error object shared by several responses
            # crashes the pip Triton 2.51 under concurrency and garbles the messages
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError(f"model {self.name!r}: "
                                                                          f"{type(err).__name__}: {err}"))]
        responses = []
        for em_part, michel_part in zip(torch.split(em, sizes), torch.split(michel, sizes)):
            tensors = [pb_utils.Tensor.from_dlpack("em_trk_none", dlpack.to_dlpack(em_part.contiguous())),
                       pb_utils.Tensor.from_dlpack("michel", dlpack.to_dlpack(michel_part.contiguous()))]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        if self.stage_log:
            times.append(time.time())
            self._log_stages(times, sizes)
        return responses

    def _log_stages(self, times: list[float], sizes: list[int]) -> None:
        line = {"pid": os.getpid(), "start": times[0], "inputs_s": self._inputs_at - times[0],
                "h2d_s": times[1] - self._inputs_at, "forward_s": times[2] - times[1],
                "d2h_and_responses_s": times[3] - times[2], "requests": len(sizes), "rows": sum(sizes)}
        with open(self.stage_log, "a") as log:
            log.write(json.dumps(line) + "\n")

    def finalize(self) -> None:
        if getattr(self, "pool", None) is not None:
            self.pool.release()
        self.net = None
