"""The native onnxruntime backend on a GPU: every ONNX model served on a KIND_GPU and a KIND_CPU instance,
each answer compared with direct inference on the CPU and with direct inference on CUDA.

::

    sonic bench native-gpu --out OUT [--cms DIR] [--models a,b] [--expect-cuda]

Needs onnxruntime-gpu as the server's and this python's ``onnxruntime`` (with the CUDA libraries it links
on ``LD_LIBRARY_PATH``) and a GPU. Each model of ``data/models`` (and of ``--cms``, a folder of CMS's models)
becomes two entries of one repository, ``<name>__gpu`` and ``<name>__cpu``, served by one native server.
``OUT/results.json`` gets, per model and output, ``[max abs diff, max abs diff / (|reference| + 1e-3), max
|reference|]`` of: GPU instance vs direct CPU, CPU instance vs direct CPU, direct CUDA vs direct CPU, and GPU
instance vs direct CUDA; the latency of one large request on each instance; nvidia-smi's view of the server;
the backend's log lines saying where each instance runs. ``--expect-cuda`` fails unless every KIND_GPU instance
runs on the CUDA provider; ``--cpu-only`` checks this tool on a machine without a GPU (both entries on CPU).
The latest run's figures are in docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import tritonclient.grpc as grpcclient
from tritonclient.grpc import model_config_pb2 as mc

from sonic_hep.framework.inference.backends.native import build
from sonic_hep.framework.inference.backends.onnxruntime.ort_session import open_session
from sonic_hep.framework.inference import ModelRepository
from sonic_hep.framework.inference.serving import write_entry
from sonic_hep.framework.inference.serving import TritonServer
from sonic_hep.workflows.bench._fuzz import ModelSpec, infer_arrays, valid_inputs
from sonic_hep.workflows.bench._report import BenchReport
from sonic_hep.framework.paths import PROJECT_ROOT

PROJECT = PROJECT_ROOT
#: the project's model repositories with ONNX models
SHIPPED = [PROJECT / "data" / "models" / n for n in ("demo", "miniaod", "protodune", "exatrkx")]


def gpu_apps() -> str:
    """nvidia-smi's list of processes on the GPU (pid, name, memory)."""
    try:
        return subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as err:  # noqa: BLE001
        return f"nvidia-smi: {err}"


def write_form(info, dest: Path, name: str, kind, cpu_only: bool = False) -> None:
    """``info`` as model ``name`` in ``dest`` with one instance of ``kind`` on GPU 0 (its files linked)."""
    config = mc.ModelConfig()
    config.CopyFrom(info.config)
    config.name = name
    del config.instance_group[:]
    group = config.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU if cpu_only else kind)
    if group.kind == mc.ModelInstanceGroup.KIND_GPU:
        group.gpus.append(0)
    write_entry(info, dest / name, config)


def inputs_for(info, rng, rows: int, size: int) -> dict[str, np.ndarray]:
    """Valid inputs (the fuzzer's) of ``rows`` rows, variable dimensions ``size``, ParticleNet masks set to 1
    for the first two thirds, index inputs within range."""
    spec = ModelSpec(info.name, info.max_batch_size, tuple((t.name, t.datatype, t.dims) for t in info.inputs),
                     tuple(t.name for t in info.outputs))
    arrays = valid_inputs(spec, rng, rows=rows)
    offset = 1 if info.max_batch_size > 0 else 0
    for t in info.inputs:
        for axis, dim in enumerate(t.dims):
            if dim < 0:
                arrays[t.name] = np.take(arrays[t.name], range(size), axis=axis + offset)
        if list(t.dims) == [1] and np.issubdtype(arrays[t.name].dtype, np.integer):
            arrays[t.name] = np.minimum(arrays[t.name], size)
        if "mask" in t.name and arrays[t.name].dtype == np.float32:  # ParticleNet masks: 1 for the first entries
            mask = np.zeros_like(arrays[t.name])
            mask[..., : max(1, size * 2 // 3)] = 1
            arrays[t.name] = mask
    return arrays


def diff(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """max |a-b|, max |a-b| / (|b| + 1e-3), max |b| (as float64; bools and ints too)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if a64.size == 0:
        return 0.0, 0.0, 0.0
    d = np.abs(a64 - b64)
    return float(d.max()), float((d / (np.abs(b64) + 1e-3)).max()), float(np.abs(b64).max())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cms", help="a folder of CMS's models (served and compared too)")
    parser.add_argument("--models", help="comma-separated model names (default: every ONNX model)")
    parser.add_argument("--expect-cuda", action="store_true", help="fail unless every KIND_GPU instance runs on CUDA")
    parser.add_argument("--cpu-only", action="store_true", help="no GPU here: both entries on CPU (checks the tool)")
    parser.add_argument("--requests", type=int, default=8, help="requests per model (1 to 64 rows)")


def run(args: argparse.Namespace) -> int:
    """Builds the repository, serves it, sends the requests, writes ``results.json``."""
    bench = BenchReport.start("native-gpu", args.out, stem="results")
    out = bench.out
    paths = SHIPPED + ([Path(args.cms)] if args.cms else [])
    repository = ModelRepository([str(p) for p in paths])
    infos = {n: repository.get(n) for n in repository.names()}
    infos = {n: i for n, i in infos.items() if i.config.platform == "onnxruntime_onnx"}
    if args.models:
        infos = {n: infos[n] for n in args.models.split(",")}
    report: dict = {**bench.fields(), "onnxruntime": ort.__version__, "ort_file": ort.__file__,
                    "providers": ort.get_available_providers()}
    library, version = build.onnxruntime_library()
    report["native_ort_library"] = str(library)
    t0 = time.time()
    report["native_library"] = str(build.native_library())
    report["native_build_s"] = round(time.time() - t0, 1)
    print(json.dumps(report, indent=1), flush=True)
    dest = out / "repo"
    for name, info in infos.items():
        write_form(info, dest, name + "__gpu", mc.ModelInstanceGroup.KIND_GPU, args.cpu_only)
        write_form(info, dest, name + "__cpu", mc.ModelInstanceGroup.KIND_CPU, args.cpu_only)
    report["gpu_apps_before"] = gpu_apps()
    t0 = time.time()
    server = TritonServer([dest], backend="native", device="gpu", workdir=out / "server", keep_workdir=True,
                          startup_timeout=300)
    server.start()
    report["server_start_s"] = round(time.time() - t0, 1)
    report["gpu_apps_loaded"] = gpu_apps()
    report["server_pid"] = server.pid
    report["model_backends"] = sorted(set(server.model_backends.values()))
    results = {}
    cuda_sessions = "CUDAExecutionProvider" in ort.get_available_providers()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        for name, info in infos.items():
            cpu = open_session(str(info.model_file()), info.config_dict, ["CPUExecutionProvider"])
            gpu = None
            if cuda_sessions:  # direct inference on CUDA, with its own settings (TF32 off)
                gpu = open_session(str(info.model_file()), info.config_dict,
                                   [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"])
            outputs = [t.name for t in info.outputs]
            rng = np.random.default_rng(1)
            entry = {"requests": 0, "native_gpu_vs_cpu": {}, "native_cpu_vs_cpu": {}, "python_cuda_vs_cpu": {},
                     "native_gpu_vs_python_cuda": {}, "python_cuda_providers": gpu.get_providers() if gpu else None}
            for k in range(args.requests):
                rows = [1, 2, 5, 16, 3, 64, 1, 8][k % 8] if info.max_batch_size > 0 else 1
                rows = min(rows, info.max_batch_size) if info.max_batch_size > 0 else 1
                arrays = inputs_for(info, rng, rows, [20, 17, 19, 18][k % 4])
                expected = dict(zip(outputs, cpu.run(outputs, arrays)))
                answers = {"native_gpu_vs_cpu": infer_arrays(client, name + "__gpu", arrays, outputs),
                           "native_cpu_vs_cpu": infer_arrays(client, name + "__cpu", arrays, outputs)}
                if gpu is not None:
                    answers["python_cuda_vs_cpu"] = dict(zip(outputs, gpu.run(outputs, arrays)))
                for key, answer in answers.items():
                    for o in outputs:
                        assert answer[o].shape == expected[o].shape and answer[o].dtype == expected[o].dtype, (name, o)
                        a, r, m = diff(answer[o], expected[o])
                        old = entry[key].get(o, [0.0, 0.0, 0.0])
                        entry[key][o] = [max(a, old[0]), max(r, old[1]), max(m, old[2])]
                if gpu is not None:
                    for o in outputs:
                        a, r, m = diff(answers["native_gpu_vs_cpu"][o], answers["python_cuda_vs_cpu"][o])
                        old = entry["native_gpu_vs_python_cuda"].get(o, [0.0, 0.0, 0.0])
                        entry["native_gpu_vs_python_cuda"][o] = [max(a, old[0]), max(r, old[1]), max(m, old[2])]
                entry["requests"] += 1
            # latency of one larger request, native GPU vs native CPU instance
            rows = min(info.max_batch_size, 256) if info.max_batch_size > 0 else 1
            arrays = inputs_for(info, rng, rows, 20)
            for form in ("gpu", "cpu"):
                infer_arrays(client, f"{name}__{form}", arrays, outputs)
                times = []
                for _ in range(5):
                    t = time.perf_counter()
                    infer_arrays(client, f"{name}__{form}", arrays, outputs)
                    times.append(time.perf_counter() - t)
                entry[f"latency_ms_{form}_rows{rows}"] = round(1e3 * float(np.median(times)), 2)
            results[name] = entry
            print(name, json.dumps(entry), flush=True)
        report["gpu_apps_after"] = gpu_apps()
    finally:
        client.close()
        server.stop()
    log = (out / "server" / "tritonserver.log").read_text(errors="replace")
    report["log_lines"] = [line for line in log.splitlines()
                           if re.search(r"sonic-hep native|instance .* serves|running on CPU|CUDA|cuda", line)][:200]
    report["models"] = results
    bench.write(None, report, indent=1)
    gpu_lines = [line for line in report["log_lines"] if "(GPU 0," in line]
    warned = [line for line in report["log_lines"] if "running on CPU" in line]
    print("instances on GPU:", len(gpu_lines), "warnings (CPU fallback):", len(warned))
    for line in warned[:5]:
        print(" ", line)
    worst = max((v[0] for e in results.values() for v in e["native_gpu_vs_cpu"].values()), default=0)
    print("worst native GPU vs CPU max abs diff:", worst)
    if args.expect_cuda and (len(gpu_lines) != len(infos) or warned):
        print("not every KIND_GPU instance runs on CUDA", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for results.json and the server's folder")
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
