"""Train the MiniAOD models on generated events, export them to ONNX, write the Triton repository.

Needs the optional ``train`` extra (``pip install 'sonic-hep[train]'``); running the models needs only
onnxruntime. Three steps, which can run on different machines (``fit`` needs only PyTorch and numpy)::

    sonic data generate miniaod --events 3000 --process ttbar --seed 101 --output ttbar.root   # and qcd,
    ...                                        # ztautau, wjets (AK4, DeepMET; seeds 101-106)
    # AK8: boosted tops (pTHat > 450 GeV: ~0.8 contained hadronic tops per event) and QCD dijets
    sonic data generate miniaod --events 3500 --process ttbar --pthat-min 450 --seed 201 --output tt_201.root
    sonic data generate miniaod --events 3500 --process ttbar --pthat-min 450 --seed 202 --output tt_202.root
    sonic data generate miniaod --events 2000 --process ttbar --pthat-min 450 --seed 204 --output tt_204.root
    sonic data generate miniaod --events 3000 --process qcd --pthat-min 400 --seed 203 --output qcd_203.root
    # DeepTau: genuine τs, τ → e/μ, W → e/μ and jets faking τs (files with the reco Electron/Muon collections)
    sonic data generate miniaod --events 1500 --process ztautau --seed 211 --output ztt_211.root
    sonic data generate miniaod --events 1000 --process ztautau --seed 213 --output ztt_213.root   # and 214
    sonic data generate miniaod --events 1800 --process wjets,ttbar --seed 212 --output wj_212.root
    sonic data generate miniaod --events 1000 --process wjets,ztautau --seed 215 --output wj_215.root
    sonic data generate miniaod --events 800 --process ttbar,qcd --seed 216 --output tq_216.root
    sonic data generate miniaod --events 2400 --process ttbar,qcd --seed 217 --output tq_217.root
    sonic data generate miniaod --events 1500 --process ztautau --seed 218 --output x_218.root     # and 219
    sonic data generate miniaod --events 1500 --process ttbar,qcd --seed 220 --output x_220.root   # and 222
    sonic data generate miniaod --events 1200 --process wjets --seed 221 --output x_221.root
    python -m sonic_hep.data.miniaod.train prepare --models ak8 --ak8-files tt_201.root tt_202.root tt_204.root \\
        qcd_203.root --cache work/miniaod
    python -m sonic_hep.data.miniaod.train prepare --models tau --files ztt_211.root ztt_213.root ztt_214.root \\
        wj_212.root wj_215.root tq_216.root tq_217.root x_218.root x_219.root x_220.root x_221.root x_222.root \\
        --cache work/miniaod
    python -m sonic_hep.data.miniaod.train fit --models ak8,tau --epochs ak8=30,tau=30 --cache work/miniaod \\
        --device cuda                                                                   # or cpu
    python -m sonic_hep.data.miniaod.train export --models ak8,tau --cache work/miniaod --out data/models/miniaod

(The shipped DeepTau's sample was prepared file by file and the parts joined in this order: one ``prepare``
over all files keeps another random 35 % of the jet fakes, a sample of the same make-up.)

``export`` checks each model: onnxruntime must reproduce PyTorch on validation inputs to 1e-4, and
the validation metrics (AUCs, MET resolution) are stored in ``training.json`` in the repository.
"""

from __future__ import annotations

import argparse
import io
import json
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ...framework.extras import MissingDependency, require
from . import fitting
from .samples import AK4_LABELS, AK8_LABELS, TAU_BLOCKS, TAU_GRID_NAMES, TAU_GRIDS, TAU_LABELS, JetSample, \
    MetSample, TauSample

MODEL_NAMES = {"ak4": "miniaod_particlenet_ak4", "ak8": "miniaod_particlenet_ak8", "met": "miniaod_deepmet",
               "tau": "miniaod_deeptau"}
SAMPLES = {"ak4": JetSample, "ak8": JetSample, "met": MetSample, "tau": TauSample}
PN_INPUTS = ("pf_points", "pf_features", "pf_mask", "sv_points", "sv_features", "sv_mask")
MET_INPUTS = ("input", "input_cat0", "input_cat1", "input_cat2")
TAU_INPUTS = ("input_tau", *TAU_GRID_NAMES)


def _torch():
    """torch, imported only for training (running the models needs onnxruntime alone)."""
    return require("torch", "training the MiniAOD models")


def log(text: str) -> None:
    print(text, flush=True)


def prepare(files: list[str], ak8_files: list[str] | None, cache: Path, models: list[str],
            max_events: int = -1) -> None:
    """Builds the samples with the producers' preprocessing and saves them to ``cache``."""
    from . import datasets

    cache.mkdir(parents=True, exist_ok=True)
    for which in models:
        start = time.perf_counter()
        if which in ("ak4", "ak8"):
            sample = datasets.jet_sample(ak8_files or files if which == "ak8" else files, which, max_events)
            labels = AK4_LABELS if which == "ak4" else AK8_LABELS
            what = f"{len(sample)} jets {dict(zip(labels, np.bincount(sample.labels, minlength=len(labels)).tolist()))}"
        elif which == "met":
            sample = datasets.met_sample(files, max_events)
            what = f"{len(sample)} events"
        else:
            sample = datasets.tau_sample(files, max_events)
            what = f"{len(sample)} taus {dict(zip(TAU_LABELS, np.bincount(sample.labels, minlength=4).tolist()))}"
        sample.save(cache / f"{which}.npz")
        log(f"{which}: {what} in {time.perf_counter() - start:.0f} s → {cache / f'{which}.npz'}")


def fit(cache: Path, weights: Path, models: list[str], epochs: dict[str, int], device: str) -> None:
    """Trains on the cached samples; saves ``<which>.pt`` state dicts and ``<which>.json`` metrics."""
    torch = _torch()
    weights.mkdir(parents=True, exist_ok=True)
    for which in models:
        sample = SAMPLES[which].load(cache / f"{which}.npz")
        start = time.perf_counter()
        log(f"{which}: fitting {len(sample)} entries for {epochs[which]} epochs on {device}")
        if which in ("ak4", "ak8"):
            model, metrics = fitting.fit_particlenet(which, sample, epochs[which], device, log)
        elif which == "met":
            model, metrics = fitting.fit_deepmet(sample, epochs[which], device, log)
        else:
            model, metrics = fitting.fit_deeptau(sample, epochs[which], device, log)
        metrics.update(epochs=epochs[which], device=device, training_s=round(time.perf_counter() - start, 1))
        log(f"{which}: validation {metrics}")
        torch.save(model.state_dict(), weights / f"{which}.pt")
        (weights / f"{which}.json").write_text(json.dumps(metrics, indent=2) + "\n")


def _model(which: str, sample):
    from .models import DeepMET, DeepTau

    if which in ("ak4", "ak8"):
        return fitting.particlenet_model(which, sample.pf.shape[1], sample.sv.shape[1])
    return DeepMET() if which == "met" else DeepTau()


def onnx_bytes(model, inputs: Sequence[np.ndarray], names: Sequence[str], output: str,
               dynamic: dict[str, dict[int, str]]) -> bytes:
    """ONNX (opset 17, dynamic batch and lengths), checked against PyTorch with onnxruntime."""
    torch = _torch()
    import onnxruntime as ort

    from ...framework.errors import SonicError

    model.eval()
    tensors = tuple(torch.from_numpy(np.ascontiguousarray(x)) for x in inputs)
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # the TorchScript exporter is deprecated, but exports dynamic kNN graphs
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(model, tensors, buffer, input_names=list(names), output_names=[output],
                          dynamic_axes={**dynamic, output: {0: "batch"}}, opset_version=17, dynamo=False)
    data = buffer.getvalue()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = session.run([output], {n: np.ascontiguousarray(x) for n, x in zip(names, inputs)})[0]
    with torch.no_grad():
        want = model(*tensors).numpy()
    diff = float(np.abs(got - want).max())
    if diff > 1e-4:
        raise SonicError(f"ONNX export of {output!r} differs from PyTorch by {diff}")
    return data


def export(cache: Path, weights: Path, out: Path, models: list[str]) -> None:
    """Writes the repository entries (ONNX + config.pbtxt with checksum + labels) and ``training.json``."""
    torch = _torch()
    from ...framework.inference import TensorSpec, write_model

    out.mkdir(parents=True, exist_ok=True)
    summary_path = out / "training.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    for which in models:
        sample = SAMPLES[which].load(cache / f"{which}.npz")
        model = _model(which, sample)
        model.load_state_dict(torch.load(weights / f"{which}.pt", map_location="cpu"))
        _, val = fitting.split(len(sample))
        example = sample.batch(val[:4])
        name = MODEL_NAMES[which]
        if which in ("ak4", "ak8"):
            dynamic = {n: {0: "batch", 2: "particles" if n.startswith("pf") else "vertices"} for n in PN_INPUTS}
            data = onnx_bytes(model, example, PN_INPUTS, "softmax", dynamic)
            n_pf, n_sv = sample.pf.shape[1], sample.sv.shape[1]
            specs = [TensorSpec("pf_points", "FP32", (2, -1)), TensorSpec("pf_features", "FP32", (n_pf, -1)),
                     TensorSpec("pf_mask", "FP32", (1, -1)), TensorSpec("sv_points", "FP32", (2, -1)),
                     TensorSpec("sv_features", "FP32", (n_sv, -1)), TensorSpec("sv_mask", "FP32", (1, -1))]
            labels = AK4_LABELS if which == "ak4" else AK8_LABELS
            write_model(out, name, data, specs, [TensorSpec("softmax", "FP32", (len(labels),))],
                        max_batch_size=500 if which == "ak4" else 160,
                        preferred_batch_sizes=(200,) if which == "ak4" else (80,), labels={"softmax": list(labels)})
        elif which == "met":
            data = onnx_bytes(model, sample.batch(val[:2], 4500), MET_INPUTS, "output",
                              {n: {0: "batch"} for n in MET_INPUTS})
            specs = [TensorSpec("input", "FP32", (4500, 8))] + [TensorSpec(f"input_cat{i}", "FP32", (4500, 1))
                                                               for i in range(3)]
            write_model(out, name, data, specs, [TensorSpec("output", "FP32", (2,))], max_batch_size=100,
                        preferred_batch_sizes=(8, 16))
        else:
            data = onnx_bytes(model, example, TAU_INPUTS, "main_output", {n: {0: "batch"} for n in TAU_INPUTS})
            specs = [TensorSpec("input_tau", "FP32", (43,))]
            for grid_name in TAU_GRID_NAMES:
                grid, block = grid_name.split("_")[1:]
                size = TAU_GRIDS[grid]
                specs.append(TensorSpec(grid_name, "FP32", (size, size, TAU_BLOCKS[block])))
            write_model(out, name, data, specs, [TensorSpec("main_output", "FP32", (4,))], max_batch_size=500,
                        preferred_batch_sizes=(64,), labels={"main_output": list(TAU_LABELS)})
        metrics_path = weights / f"{which}.json"
        summary[name] = json.loads(metrics_path.read_text()) if metrics_path.exists() else {}
        summary[name]["onnx_bytes"] = len(data)
        summary_path.write_text(json.dumps(summary, indent=2) + "\n")
        log(f"{which}: wrote {out / name} ({len(data) / 1e3:.0f} kB)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("prepare", "fit", "export", "all"))
    parser.add_argument("--files", nargs="+", help="generated files for AK4, DeepMET and DeepTau (prepare)")
    parser.add_argument("--ak8-files", nargs="+", help="files with boosted jets for AK8 (default: --files)")
    parser.add_argument("--cache", default="work/miniaod", help="where prepared samples are kept")
    parser.add_argument("--weights", help="where fitted weights are kept (default: --cache)")
    parser.add_argument("--out", default="data/models/miniaod", help="Triton model repository to write")
    parser.add_argument("--models", default="ak4,ak8,met,tau", help="comma-separated: ak4, ak8, met, tau")
    parser.add_argument("--epochs", default="ak4=20,ak8=20,met=15,tau=15", help="epochs per model")
    parser.add_argument("--device", default="cpu", help="PyTorch device for fit (cpu, cuda)")
    parser.add_argument("--threads", type=int, default=2, help="PyTorch CPU threads")
    parser.add_argument("--max-events", type=int, default=-1, help="events read per sample (prepare)")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODEL_NAMES]
    if unknown:
        parser.error(f"--models: unknown {unknown}; use {sorted(MODEL_NAMES)}")
    epochs = {k: int(v) for k, v in (item.split("=") for item in args.epochs.split(","))}
    cache, weights = Path(args.cache), Path(args.weights or args.cache)
    if args.step != "prepare":
        try:
            _torch()
        except MissingDependency as err:
            parser.exit(1, f"{parser.prog}: error: {err}\n")
    if args.step in ("prepare", "all"):
        if not args.files:
            parser.error("prepare needs --files")
        prepare(args.files, args.ak8_files, cache, models, args.max_events)
    if args.step in ("fit", "all"):
        _torch().set_num_threads(args.threads)
        fit(cache, weights, models, epochs, args.device)
    if args.step in ("export", "all"):
        export(cache, weights, Path(args.out), models)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
