"""MiniAOD's models and CMS's ParticleNet on a GPU: inferences/s and events/s vs batch size, CPU vs GPU vs served.

For each model (``--models``) and batch size (``--batch-sizes``, rows per call: jets, taus or events),
the throughput of:

* ``cpu-onnxruntime``: the ONNX file in-process with onnxruntime on the CPU (``--threads``), the
  reference every other mode's outputs are compared with (max |Δ| in the table);
* ``gpu-torch-fp32`` / ``gpu-torch-fp16``: the same ONNX file in-process in torch on ``--device``
  (``framework/inference/backends/onnxtorch/onnx_graph.py``: the graph rebuilt node by node from
  the file at run time, no ``.pt`` copies); fp16 is mixed precision (the weight layers in half
  precision) and is marked ✗ when its scores leave ``--fp16-tolerance``;
* ``served-gpu``: a local Triton server (the pip ``tritonserver``) serving a repository written at run
  time into a temporary folder: each model's own config with ``KIND_GPU`` instances of the python-based
  torch backends (``onnxtorch`` for ONNX files, ``pytorch`` for CMS's TorchScript twin), dynamic
  batching, ``max_batch_size`` raised to the largest batch asked; called through sonic-hep's SONIC
  client with ``--in-flight`` requests in flight (system shared memory as the client chooses).

CMS's TorchScript twin (``--cms-torchscript``) has no ONNX file: its CPU row is torch on the CPU and
its outputs are compared with onnxruntime running the ONNX twin (``--cms-onnx``) on the same inputs.

Inputs: ``--inputs FILE.npz`` takes what the MiniAOD producers really send, recorded beforehand on a
machine with the event generator by ``--record-inputs FILE.npz`` (``_model_inputs.py``: generated
tt̄/Z→ττ/W+jets events plus boosted tt̄ for AK8, the rows per event measured); rows are cycled to the
batch size and zero-padded to the model's ``preprocess.json`` maximum lengths (AK4: 50 particles,
5 SVs; AK8: 100, 10); CMS's AK4 takes MiniAOD AK4's rows. Without it (``--inputs shapes``) inputs
are drawn from the models' shapes: features as CMS's normalised inputs are (standard normal clipped
to [-5, 5]), points ±0.4 in η/φ, each jet's particle count between the minimum and maximum length
with its mask and zero padding after it, DeepMET's categorical inputs small integers; ParticleNet
then answers with saturated scores, which hide how far fp16 moves them. Events/s = inferences/s ÷
rows per event (recorded, else a stated assumption for a tt̄ event; ``--per-event`` overrides).

Each point: one call whose outputs are compared (also the warm-up), then calls until ``--seconds``
have passed (at least 3). Batch sizes above a model's cap (DeepTau and DeepMET rows are 420 and
160 kB: 256 rows) are skipped. Results: ``gpu_models.md`` (a summary of each mode's best throughput,
then a table per model), ``gpu_models.json``, ``gpu_models.png`` in ``--out``. Run time with the
defaults: ~107 points of ≥ 0.5 s plus the server's start, bounded by ``--budget-s`` (220 s; points
not started by then are listed as skipped); shorten with ``--seconds 0.2``, fewer ``--batch-sizes``,
``--models`` or ``--modes``.

Examples::

    sonic bench gpu-models --record-inputs build/gpu-models/inputs.npz        # here: needs pythia8mc
    sonic bench gpu-models --device cpu --batch-sizes 1,8 --seconds 0.2 --inputs build/gpu-models/inputs.npz  # dry run
    sonic bench gpu-models --inputs build/gpu-models/inputs.npz \
        --cms-onnx cms/particlenet_AK4 --cms-torchscript cms/particlenet_AK4_PT                      # on a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from ...framework.futures import gather
from ...framework.inference import ModelInfo, ModelRepository
from ...framework.inference.serving import write_entry
from ...framework.inference.serving import TritonServer
from ...framework.inference import InferenceConfig, make_client, resolve_repository
from ._report import BenchReport, header
from ._served_time import steady_throughput, time_table
from ...framework.paths import shared_folder

#: the shared folder beside a development checkout (CMS's models; absent in a user's checkout)
SHARED = shared_folder() / "real"
MODES = ("cpu-onnxruntime", "gpu-torch-fp32", "gpu-torch-fp16", "served-gpu")


@dataclass(frozen=True)
class Model:
    """A model under test: where its repository entry comes from and what a row of it is."""

    key: str
    #: "miniaod" (the shipped repository), "cms-onnx" or "cms-torchscript" (the --cms-* folders)
    source: str
    unit: str
    #: objects per tt̄ event (assumption; --per-event overrides)
    per_event: float
    #: the largest batch measured (bytes per row decide it)
    cap: int = 1024
    #: the entry's name in the miniaod repository
    name: str = ""
    #: the recorded model whose rows feed it (--inputs FILE): itself, or MiniAOD's AK4 for CMS's AK4
    recorded_as: str = ""


MODELS = {m.key: m for m in (
    Model("particlenet_ak4", "miniaod", "jets", 6, name="miniaod_particlenet_ak4"),
    Model("particlenet_ak8", "miniaod", "jets", 2, name="miniaod_particlenet_ak8"),
    Model("deeptau", "miniaod", "taus", 4, cap=256, name="miniaod_deeptau"),
    Model("deepmet", "miniaod", "events", 1, cap=256, name="miniaod_deepmet"),
    Model("cms_particlenet_ak4", "cms-onnx", "jets", 6, recorded_as="miniaod_particlenet_ak4"),
    Model("cms_particlenet_ak4_pt", "cms-torchscript", "jets", 6, recorded_as="miniaod_particlenet_ak4"),
)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {', '.join(MODES)}")
    parser.add_argument("--batch-sizes", default="1,16,64,256,1024", help="rows per call (jets, taus, events)")
    parser.add_argument("--device", default="cuda:0",
                        help='torch device of the GPU modes; "cpu" runs every code path on the CPU (dry run: the server '
                             "then has KIND_CPU instances)")
    parser.add_argument("--ort-threads", type=int, default=len(os.sched_getaffinity(0)), help="onnxruntime (and torch) CPU threads per session")
    parser.add_argument("--seconds", type=float, default=0.5, help="time per point (after one warm-up call)")
    parser.add_argument("--in-flight", type=int, default=4, help="requests in flight against the server")
    parser.add_argument("--instances", type=int, default=1, help="server instances per model")
    parser.add_argument("--served-precision", choices=("float32", "float16"), default="float32",
                        help="precision of the served ONNX models (float16: mixed, as gpu-torch-fp16)")
    parser.add_argument("--fp16-tolerance", type=float, default=0.01,
                        help="largest |fp16 - fp32 CPU| of a score (DeepMET: relative to its largest |output|) for fp16 to count")
    parser.add_argument("--per-event", default="", help="objects per event, e.g. particlenet_ak4=8,deeptau=2 (defaults: "
                        + ", ".join(f"{m.key}={m.per_event:g}" for m in MODELS.values()) + ")")
    parser.add_argument("--cms-onnx", default=str(SHARED / "cms-models" / "particlenet_AK4"),
                        help="CMS's particlenet_AK4 repository entry (config.pbtxt, 1/model.onnx)")
    parser.add_argument("--cms-torchscript", default=str(SHARED / "cms-models-torchscript" / "particlenet_AK4_PT"),
                        help="CMS's particlenet_AK4_PT entry (config.pbtxt, 1/model.pt)")
    parser.add_argument("--seed", type=int, default=5, help="seed of the inputs")
    parser.add_argument("--inputs", default="shapes",
                        help='"shapes" (drawn from the models\' shapes) or a file written by --record-inputs (real events)')
    parser.add_argument("--record-inputs", metavar="FILE.npz",
                        help="generate --record-events MiniAOD events, record what the producers send to each model into "
                             "FILE.npz, and stop (needs pythia8mc; carry the file to a GPU machine, use --inputs FILE.npz)")
    parser.add_argument("--record-events", type=int, default=60, help="events generated for --record-inputs")
    parser.add_argument("--record-rows", type=int, default=64, help="rows kept per model by --record-inputs")
    parser.add_argument("--budget-s", type=float, default=220.0,
                        help="points not started by then are skipped (listed in the report): a bounded run time")


# -- models and inputs ---------------------------------------------------------------------------------
def entry(model: Model, args: argparse.Namespace) -> ModelInfo:
    """The model's repository entry (checksums verified as a server would)."""
    if model.source == "miniaod":
        return ModelRepository([resolve_repository("data/models/miniaod")]).get(model.name)
    folder = Path(args.cms_onnx if model.source == "cms-onnx" else args.cms_torchscript)
    if not (folder / "config.pbtxt").is_file():
        raise FileNotFoundError(f"{model.key}: no config.pbtxt in {folder} "
                                f"(--{'cms-onnx' if model.source == 'cms-onnx' else 'cms-torchscript'})")
    info = ModelRepository([folder.parent]).get(folder.name)
    info.verify_checksums()
    return info


def lengths(info: ModelInfo) -> dict[str, tuple[int, int]]:
    """(min, max) length of each variable input from the entry's ``preprocess.json`` (names without ``__i``)."""
    path = info.path / "preprocess.json"
    if not path.is_file():
        return {}
    spec = json.loads(path.read_text())
    return {name.split("__")[0]: (int(v.get("min_length", 1)), int(v["max_length"]))
            for name, v in spec.items() if isinstance(v, dict) and "max_length" in v}


def make_inputs(info: ModelInfo, rows: int, seed: int,
                recorded: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """``rows`` rows of the model's inputs: the ``recorded`` rows (in the config's input order, cycled, variable
    lengths zero-padded to preprocess.json's maximum), or drawn from its shapes as the module docstring says."""
    if recorded:
        return from_recorded(info, rows, recorded)
    rng = np.random.default_rng(seed)
    bounds = lengths(info)
    counts: dict[str, np.ndarray] = {}
    arrays = {}
    for spec in info.inputs:
        base = spec.name.split("__")[0].split(":")[0]
        group = base.split("_")[0]  # pf / sv: one particle count per jet for points, features and mask
        low, high = bounds.get(base, (1, 1))
        dims = [high if d < 0 else d for d in spec.dims]
        shape = (rows, *dims)
        if base.startswith("input_cat"):
            value = rng.integers(0, 3, size=shape).astype(np.float32)
        elif "points" in base:
            value = rng.uniform(-0.4, 0.4, size=shape).astype(np.float32)
        elif "mask" in base:
            value = np.ones(shape, np.float32)
        else:
            value = np.clip(rng.standard_normal(shape), -5, 5).astype(np.float32)
        if any(d < 0 for d in spec.dims):  # [rows, channels, length]: zero after each jet's own count
            if group not in counts:
                counts[group] = rng.integers(low, high + 1, size=rows)
            value = value * (np.arange(high)[None, :] < counts[group][:, None])[:, None, :].astype(np.float32)
        arrays[spec.name] = value.astype(spec.dtype)
    return arrays


def from_recorded(info: ModelInfo, rows: int, recorded: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``rows`` rows cycled from recorded ones; the recording's inputs are matched to the model's by position
    (CMS's TorchScript names them ``pf_points__0`` ...), and must have the model's fixed dimensions."""
    bounds = lengths(info)
    sources = list(recorded.values())
    if len(sources) != len(info.inputs):
        raise ValueError(f"{info.name}: the recording has {len(sources)} inputs, the model {len(info.inputs)}")
    arrays = {}
    for spec, source in zip(info.inputs, sources):
        picked = source[np.arange(rows) % len(source)]
        fixed = [(got, want) for got, want in zip(picked.shape[1:], spec.dims) if want >= 0]
        if len(picked.shape) != len(spec.dims) + 1 or any(got != want for got, want in fixed):
            raise ValueError(f"{info.name}: recorded input of shape {list(picked.shape[1:])} for {spec.name!r} "
                             f"{list(spec.dims)}")
        if spec.dims and spec.dims[-1] < 0:
            length = max(bounds.get(spec.name.split("__")[0], (1, picked.shape[-1]))[1], picked.shape[-1])
            picked = np.pad(picked, [(0, 0)] * (picked.ndim - 1) + [(0, length - picked.shape[-1])])
        arrays[spec.name] = np.ascontiguousarray(picked, dtype=spec.dtype)
    return arrays


# -- runners ---------------------------------------------------------------------------------------------
def cpu_runner(model: Model, info: ModelInfo, threads: int) -> Any:
    """onnxruntime on the CPU (TorchScript twin: torch on the CPU)."""
    if model.source == "cms-torchscript":
        from ...framework.inference.backends.pytorch.torchscript import open_torchscript

        return open_torchscript(str(info.model_file()), info.config_dict, "cpu", threads)
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(str(info.model_file()), options, providers=["CPUExecutionProvider"])


def torch_runner(model: Model, info: ModelInfo, device: str, precision: str, threads: int) -> Any:
    """The model in torch on ``device``: the ONNX graph rebuilt, or the TorchScript file (``threads``: CPU only)."""
    threads = threads if device == "cpu" else None
    if model.source == "cms-torchscript":
        from ...framework.inference.backends.pytorch.torchscript import open_torchscript

        return open_torchscript(str(info.model_file()), info.config_dict, device, threads)
    from ...framework.inference.backends.onnxtorch.onnx_graph import open_onnx_torch

    return open_onnx_torch(str(info.model_file()), device, precision, threads)


def reference_runner(model: Model, args: argparse.Namespace) -> tuple[Any, ModelInfo] | None:
    """What the TorchScript twin's outputs are compared with: onnxruntime on its ONNX twin."""
    if model.source != "cms-torchscript":
        return None
    onnx_info = entry(MODELS["cms_particlenet_ak4"], args)
    return cpu_runner(MODELS["cms_particlenet_ak4"], onnx_info, args.ort_threads), onnx_info


def run_outputs(runner: Any, info: ModelInfo, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    return runner.run([o.name for o in info.outputs], inputs)


def throughput(call: Callable[[], Any], rows: int, seconds: float, warm_up: bool = True) -> dict[str, float]:
    """Rows per second of ``call`` (a warm-up call unless the caller just made one, then at least 3 calls and
    ``seconds``)."""
    if warm_up:
        call()
    calls, start = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - start < seconds:
        call()
        calls += 1
    elapsed = time.perf_counter() - start
    return {"inferences_per_s": rows * calls / elapsed, "ms_per_call": 1000 * elapsed / calls, "calls": calls}


def max_diff(reference: list[np.ndarray], outputs: list[np.ndarray], relative: bool) -> float:
    """max |Δ| over the outputs (relative to the largest |reference| when ``relative``)."""
    diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))) for a, b in zip(reference, outputs))
    if relative:
        diff /= max(1.0, max(float(np.max(np.abs(r))) for r in reference))
    return diff


# -- the served repository ----------------------------------------------------------------------------------
def write_served_repository(entries: dict[str, ModelInfo], dest: Path, max_batch: int, instances: int,
                            precision: str = "float32") -> ModelRepository:
    """A repository of each model's own files (linked) and its config with ``instances`` KIND_GPU instances of a
    python-based torch backend (``onnxtorch`` for ONNX, ``pytorch`` for TorchScript), dynamic batching, and
    ``max_batch_size`` at least ``max_batch``. Checksums stay in the config: the server verifies them."""
    for info in entries.values():
        config = mc.ModelConfig()
        config.CopyFrom(info.config)
        if config.platform == "onnxruntime_onnx":
            config.ClearField("platform")
            config.backend = "onnxtorch"
            config.default_model_filename = "model.onnx"
            config.parameters["precision"].string_value = precision
        config.max_batch_size = max(config.max_batch_size, max_batch)
        config.ClearField("instance_group")
        config.instance_group.add(count=instances, kind=mc.ModelInstanceGroup.KIND_GPU)
        config.ClearField("optimization")
        config.dynamic_batching.SetInParent()
        config.dynamic_batching.ClearField("preferred_batch_size")
        config.dynamic_batching.max_queue_delay_microseconds = 100
        write_entry(info, dest / info.name, config)
    return ModelRepository([dest])


def same_card(device: str) -> list[int] | None:
    """The served GPU modes' card: the position of torch's ``cuda:N`` (``cuda``: 0); None on the CPU."""
    if not device.startswith("cuda"):
        return None
    return [int(device.partition(":")[2] or 0)]


def served_throughput(client: Any, name: str, inputs: dict[str, np.ndarray], rows: int, in_flight: int,
                      seconds: float) -> dict[str, float]:
    """Rows per second with ``in_flight`` requests of ``rows`` rows always in flight, as a fleet's jobs keep a
    server busy, and where a request's time went (``_served_time.py``; ms_per_call: one request's latency)."""
    return steady_throughput(client, name, inputs, rows, in_flight, seconds)


# -- measuring --------------------------------------------------------------------------------------------
def measure_model(model: Model, info: ModelInfo, modes: list[str], batches: list[int], args: argparse.Namespace,
                  client: Any, per_event: float, deadline: float,
                  recorded: dict[str, np.ndarray] | None = None) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Rows of the table for one model; failures by mode (a missing GPU or server keeps the other modes).
    Points not started by ``deadline`` (``time.perf_counter``) are skipped, named in the failures."""
    rows: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    sizes = [b for b in batches if b <= model.cap]
    reference = reference_runner(model, args)
    runners: dict[str, Any] = {}
    for mode in modes:
        if mode == "served-gpu" or (mode == "gpu-torch-fp16" and model.source == "cms-torchscript"):
            continue  # the TorchScript file is CMS's fp32 export: its fp16 is not this benchmark's to make
        try:
            if mode == "cpu-onnxruntime":
                runners[mode] = cpu_runner(model, info, args.ort_threads)
            else:
                runners[mode] = torch_runner(model, info, args.device, "float16" if mode.endswith("fp16") else "float32",
                                             args.ort_threads)
        except Exception as err:  # noqa: BLE001 - reported in the table's failures
            failures[mode] = f"{type(err).__name__}: {err}"
    relative = model.unit == "events"  # DeepMET's (px, py) are GeV, not scores
    ref_runner, ref_info = reference or (runners.get("cpu-onnxruntime") or cpu_runner(model, info, args.ort_threads), info)
    for rows_per_call in sizes:
        if time.perf_counter() > deadline:
            failures["budget"] = f"--budget-s {args.budget_s:g} spent: batch sizes from {rows_per_call} on not measured"
            break
        inputs = make_inputs(info, rows_per_call, args.seed, recorded)
        ref_inputs = dict(zip([s.name for s in ref_info.inputs], inputs.values()))  # the twin's names, by position
        expected = run_outputs(ref_runner, ref_info, ref_inputs)
        for mode in modes:
            if mode in failures or (mode != "served-gpu" and mode not in runners):
                continue
            try:
                if mode == "served-gpu":
                    if client is None:
                        raise RuntimeError("no server")
                    names = [o.name for o in info.outputs]
                    # a wave as the timed ones (the server may run its requests as one batch), all compared
                    wave = gather([client.infer(info.name, inputs) for _ in range(args.in_flight)]).result()
                    answers = [[got[n] for n in names] for got in wave]
                    point = served_throughput(client, info.name, inputs, rows_per_call, args.in_flight, args.seconds)
                else:
                    runner = runners[mode]
                    # the reference is this mode's own call when it is onnxruntime's (large CPU batches take seconds)
                    same = mode == "cpu-onnxruntime" and reference is None
                    answers = [expected if same else run_outputs(runner, info, inputs)]  # also the warm-up
                    point = throughput(lambda r=runner: run_outputs(r, info, inputs), rows_per_call, args.seconds,
                                       warm_up=False)
            except Exception as err:  # noqa: BLE001
                failures[mode] = f"{type(err).__name__}: {err}".splitlines()[0]
                print(f"{model.key} {mode}: FAILED {failures[mode]}", flush=True)
                continue
            diff = max(max_diff(expected, outputs, relative) for outputs in answers)
            row = {"model": model.key, "entry": info.name, "unit": model.unit, "mode": mode, "batch": rows_per_call,
                   **point, "events_per_s": point["inferences_per_s"] / per_event, "max_abs_diff": diff,
                   "diff_relative": relative}
            if mode == "gpu-torch-fp16":
                row["within_tolerance"] = diff <= args.fp16_tolerance
            rows.append(row)
            print(f"{model.key:24s} {mode:16s} batch {rows_per_call:5d}: {point['inferences_per_s']:10.0f} {model.unit}/s "
                  f"({point['ms_per_call']:.2f} ms/call) max|Δ| {diff:.1e}", flush=True)
    return rows, failures


# -- report -------------------------------------------------------------------------------------------------
def markdown(report: dict[str, Any]) -> str:
    lines = header("sonic bench gpu-models: MiniAOD models and CMS ParticleNet, CPU vs GPU vs served, throughput "
                   "vs batch size", report,
                   f"Modes: {', '.join(report['modes'])}; torch device: {report['device']}; onnxruntime CPU threads: "
                   f"{report['threads']}" + (f"; served: local Triton, {report['instances']} instance(s) per model, "
                                             f"{'KIND_CPU (dry run)' if report['device'] == 'cpu' else 'KIND_GPU'}, "
                                             f"dynamic batching, {report['in_flight']} requests in flight, "
                                             f"{report['served_precision']}" if "served-gpu" in report["modes"] else ""),
                   f"Inputs: {report['inputs']}; events/s = inferences/s ÷ objects per event "
                   f"({', '.join(f'{k}={v:g}' for k, v in report['per_event'].items())})",
                   f"Max |Δ|: against onnxruntime on the CPU (DeepMET: relative to its largest |output|); "
                   f"fp16 counts when ≤ {report['fp16_tolerance']:g}")
    lines += summary(report["rows"]) + time_table(report["rows"])
    for model in dict.fromkeys(r["model"] for r in report["rows"]):
        rows = [r for r in report["rows"] if r["model"] == model]
        unit = rows[0]["unit"]
        modes = list(dict.fromkeys(r["mode"] for r in rows))
        batches = sorted({r["batch"] for r in rows})
        lines += [f"## {model} ({rows[0]['entry']})" + (f", {unit}/s and events/s" if unit != "events" else ", events/s"), ""]
        if rows[0]["entry"].endswith("_PT"):
            lines += ["CMS's TorchScript file: its CPU column is torch on the CPU; max |Δ| is against onnxruntime "
                      "running the ONNX twin on the same inputs.", ""]
        lines += [
                  "| batch | " + " | ".join(f"{m} {unit}/s | events/s | max abs diff" for m in modes) + " |",
                  "|---:|" + "---:|---:|---:|" * len(modes)]
        for batch in batches:
            cells = []
            for mode in modes:
                row = next((r for r in rows if r["mode"] == mode and r["batch"] == batch), None)
                if row is None:
                    cells += ["–", "–", "–"]
                    continue
                mark = "" if row.get("within_tolerance", True) else " ✗"
                cells += [f"{row['inferences_per_s']:,.0f}", f"{row['events_per_s']:,.0f}", f"{row['max_abs_diff']:.1e}{mark}"]
            lines.append(f"| {batch} | " + " | ".join(cells) + " |")
        lines.append("")
    if report["failures"]:
        lines += ["## Failures", ""] + [f"- {k}: {v}" for k, v in report["failures"].items()] + [""]
    lines.append(f"Total time: {report['total_s']:.0f} s.")
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    models = list(dict.fromkeys(r["model"] for r in report["rows"])) or ["(none)"]
    columns = min(3, len(models))
    lines = -(-len(models) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(5 * columns, 4 * lines), squeeze=False)
    for ax in axes.flat[len(models):]:
        ax.set_visible(False)
    for ax, model in zip(axes.flat, models):
        rows = [r for r in report["rows"] if r["model"] == model]
        unit = rows[0]["unit"] if rows else ""
        for mode in dict.fromkeys(r["mode"] for r in rows):
            pts = sorted((r["batch"], r["inferences_per_s"]) for r in rows if r["mode"] == mode)
            ax.plot(*zip(*pts), marker="o", color=f"C{MODES.index(mode)}", label=mode)
        ax.set(title=model, xlabel=f"batch size ({unit})", ylabel=f"{unit}/s", xscale="log", yscale="log")
        ticks = sorted({r["batch"] for r in rows})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.legend(fontsize=7)
    gpu = report["machine"].partition("GPU: ")[2].partition(", Linux")[0]  # the full line is in gpu_models.md
    fig.suptitle(f"throughput vs batch size — torch on {report['device']}" + (f" ({gpu})" if gpu else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90, format="png")
    plt.close(fig)


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: per model, each mode's best throughput (and its batch), and served ÷ CPU at their bests."""
    modes = [m for m in MODES if any(r["mode"] == m for r in rows)]
    lines = ["## Summary: best throughput of each mode (rows/s at batch)", "",
             "| model | " + " | ".join(modes) + " | served ÷ CPU | served ÷ GPU fp32 |",
             "|---|" + "---:|" * (len(modes) + 2)]
    for model in dict.fromkeys(r["model"] for r in rows):
        best = {}
        for mode in modes:
            candidates = [r for r in rows if r["model"] == model and r["mode"] == mode
                          and r.get("within_tolerance", True)]
            if candidates:
                best[mode] = max(candidates, key=lambda r: r["inferences_per_s"])
        cells = [f"{best[m]['inferences_per_s']:,.0f} @ {best[m]['batch']}" if m in best else "–" for m in modes]
        ratio = (f"{best['served-gpu']['inferences_per_s'] / best['cpu-onnxruntime']['inferences_per_s']:.1f}×"
                 if "served-gpu" in best and "cpu-onnxruntime" in best else "–")
        direct = (f"{best['served-gpu']['inferences_per_s'] / best['gpu-torch-fp32']['inferences_per_s']:.2f}"
                  if "served-gpu" in best and "gpu-torch-fp32" in best else "–")
        lines.append(f"| {model} | " + " | ".join(cells) + f" | {ratio} | {direct} |")
    return lines + [""]


def parse_list(text: str, option: str, known: tuple[str, ...] | None = None) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise SystemExit(f"sonic bench gpu-models: {option} is empty")
    unknown = [t for t in items if known is not None and t not in known]
    if unknown:
        raise SystemExit(f"sonic bench gpu-models: {option}: unknown {unknown}; choose from {', '.join(known)}")
    return items


def run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    if args.record_inputs:
        from ._model_inputs import record

        if args.record_events < 1 or args.record_rows < 1:
            raise SystemExit("sonic bench gpu-models: --record-events and --record-rows must be ≥ 1")
        counts = record(args.record_inputs, args.record_events, args.seed, args.record_rows)
        print(f"recorded {args.record_events} events' model inputs into {args.record_inputs}: rows per event "
              + ", ".join(f"{k} {v:.2f}" for k, v in counts.items()))
        return 0
    recordings: dict[str, dict[str, np.ndarray]] = {}
    recorded_per_event: dict[str, float] = {}
    if args.inputs != "shapes":
        from ._model_inputs import load

        if not os.path.isfile(args.inputs):
            raise SystemExit(f"sonic bench gpu-models: --inputs {args.inputs!r}: no such file "
                             "(\"shapes\", or a file written by --record-inputs)")
        try:
            recordings, recorded_per_event = load(args.inputs)
        except (OSError, ValueError) as err:
            raise SystemExit(f"sonic bench gpu-models: --inputs {args.inputs!r}: not a recording: {err}") from None
    models = [MODELS[k] for k in parse_list(args.models, "--models", tuple(MODELS))]
    modes = parse_list(args.modes, "--modes", MODES)
    try:
        batches = sorted({int(b) for b in parse_list(args.batch_sizes, "--batch-sizes")})
    except ValueError:
        raise SystemExit(f"sonic bench gpu-models: --batch-sizes {args.batch_sizes!r}: integers, comma-separated") from None
    if batches[0] < 1 or args.in_flight < 1 or args.instances < 1 or args.seconds <= 0:
        raise SystemExit("sonic bench gpu-models: batch sizes, --in-flight and --instances must be ≥ 1, --seconds > 0")
    source_of = {m.key: m.recorded_as or m.name for m in models}
    per_event = {m.key: recorded_per_event.get(source_of[m.key], m.per_event) for m in models}
    for item in parse_list(args.per_event, "--per-event") if args.per_event else []:
        key, _, value = item.partition("=")
        if key not in per_event:
            raise SystemExit(f"sonic bench gpu-models: --per-event {item!r}: {key!r} is not a measured model")
        try:
            per_event[key] = float(value)
        except ValueError:
            raise SystemExit(f"sonic bench gpu-models: --per-event {item!r}: not KEY=NUMBER") from None
    bench = BenchReport.start("gpu-models", args.out)
    failures: dict[str, str] = {}
    entries: dict[str, ModelInfo] = {}
    for model in models:
        try:
            entries[model.key] = entry(model, args)
        except Exception as err:  # noqa: BLE001 - a missing CMS folder skips that model, named
            failures[model.key] = f"{type(err).__name__}: {err}"
            print(f"{model.key}: SKIPPED {failures[model.key]}", flush=True)
    device = "cpu" if args.device == "cpu" else "gpu"
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sonic-bench-gpu-models-") as tmp:
        server = client = None
        if "served-gpu" in modes and entries:
            served = {k: v for k, v in entries.items()}
            repository = write_served_repository(served, Path(tmp) / "repository", max(batches), args.instances,
                                                 args.served_precision)
            try:
                # on the in-process modes' card alone: a KIND_GPU count is per card, and a server that saw every
                # card of a multi-GPU machine ran --instances on each (served against one card, measured on four)
                server = TritonServer(repository, device=device, workdir=Path(tmp) / "server", ort_threads=args.ort_threads,
                                      strict=True, gpus=same_card(args.device)).start()
                client = make_client(InferenceConfig(mode="sonic", repository=[str(Path(tmp) / "repository")],
                                                     servers=[server.grpc_url],
                                                     fallback=False, timeout_s=300.0))
            except Exception as err:  # noqa: BLE001
                failures["served-gpu"] = f"{type(err).__name__}: {str(err).splitlines()[0]}"
                print(f"served-gpu: FAILED {failures['served-gpu']}", flush=True)
        try:
            for model in models:
                if model.key not in entries:
                    continue
                try:
                    model_rows, model_failures = measure_model(model, entries[model.key], modes, batches, args, client,
                                                               per_event[model.key], start + args.budget_s,
                                                               recordings.get(source_of[model.key]))
                except Exception as err:  # noqa: BLE001 - its reference cannot run (a bad recording, no ONNX twin)
                    failures[model.key] = f"{type(err).__name__}: {err}".splitlines()[0]
                    print(f"{model.key}: FAILED {failures[model.key]}", flush=True)
                    continue
                rows += model_rows
                failures.update({f"{model.key} {mode}": why for mode, why in model_failures.items()})
        finally:
            if client is not None:
                client.close()
            if server is not None:
                server.stop()
    report = {**bench.fields(), "modes": modes, "device": args.device, "threads": args.ort_threads,
              "instances": args.instances, "in_flight": args.in_flight, "served_precision": args.served_precision,
              "seconds_per_point": args.seconds, "fp16_tolerance": args.fp16_tolerance, "per_event": per_event,
              "inputs": (f"recorded from generated events ({args.inputs})" if recordings else
                         f"model shapes (preprocess.json maximum lengths), seed {args.seed}"),
              "rows": rows, "failures": failures, "total_s": time.perf_counter() - start}
    bench.write(markdown(report), report, {"gpu_models.png": lambda path: plot(report, path)})
    return 1 if failures else 0
