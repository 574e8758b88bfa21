"""Fine-tunes the repository's EmTrkMichelId on Michel-rich ProtoDUNE-size events (a GPU if there is one).

::

    python -m sonic_hep.data.protodune.finetune --output work/emtrkmichelid.onnx [--install]

Why: the CPU training (:mod:`.train`, the from-scratch route) sees few Michel electrons per
CPU-minute, and its Michel head ranks hits but cannot separate them (best purity ≈ 0.4 anywhere on
its curve). Michel electrons are ~1.2 % of the hits of a full-size event (cosmic μ stopping in the
TPC), so this script

1. simulates ``--events`` full-size events (numbers ``--first-event`` on) of random stream
   ``--seed`` in ``--workers`` processes and keeps, per event, **every** Michel, shower and none hit
   and ``--track-fraction`` of the track hits (the negatives that look most like Michel electrons —
   delta rays, showers, track ends — are all kept);
2. starts from ``--start`` (default: the repository's weights; the int8 Dense-128 dequantised; the
   architecture and its 11,900,420 parameters are unchanged) and trains all of it with
   class-weighted cross-entropy on track/em/none plus binary cross-entropy on Michel
   (``--michel-weight``, ``--pos-weight``), Adam with a cosine decay over ``--minutes``, optionally
   mirroring patches in wire and drift (``--flip``); after each epoch it scores
   ``--validation-events`` full events of stream ``seed + 1000`` (natural class mix) and keeps the
   epoch with the best Michel F1 whose track-vs-shower balanced accuracy has not dropped more than
   0.02 below the starting model's;
3. folds the best-F1 Michel threshold on the validation events into the Michel bias
   (:func:`.train.calibrate_michel`, so the decision is ``michel > 0.5``) and writes the int8 ONNX
   file (:func:`~.model.to_onnx`);
4. evaluates **that ONNX file** (onnxruntime) on held-out full events of stream ``--heldout-seed``
   and writes everything to ``<output>.json``; with ``--install`` it becomes the repository's model
   (:func:`.export.install`: the ONNX entry and the GPU entry's MD5 pin; the report becomes the
   entry's ``training.json``, the one it replaces kept under ``previous``).

The shipped model is three such runs chained from the from-scratch model (each run's ``--start`` the
previous run's output; on an NVIDIA H100, 4-6 min each with simulation), see
``data/models/protodune/emtrkmichelid/training.json``::

    python -m sonic_hep.data.protodune.finetune --output run1.onnx --events 96 --minutes 4.5 --epochs 12 --lr 3e-4
    python -m sonic_hep.data.protodune.finetune --output run2.onnx --start run1.onnx --first-event 96 --events 192 \\
        --flip --validation-events 6 --minutes 3 --epochs 10 --lr 1.5e-4
    python -m sonic_hep.data.protodune.finetune --output run3.onnx --start run2.onnx --first-event 288 --events 192 \\
        --flip --validation-events 6 --minutes 3 --epochs 10 --lr 1e-4 --michel-weight 8 --pos-weight 2 --install

Needs torch (``pip install 'sonic-hep[train]'``) and ~40 GB of memory for 4 M patches on the device.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ...framework.extras import MissingDependency, require
from ...modules.protodune.metrics import classification_metrics
from .dataset import Labelled, event_patches
from .export import install
from .model import PARAMETERS, Weights, to_onnx, torch_model, weights_from_onnx, weights_of
from .readout import TRUTH_TRACK
from .simulate import Simulation
from .train import MODEL_FILE, calibrate_michel, evaluate


def _event(job: tuple[Simulation, int, int, float | None]) -> Labelled:
    """One event's labelled patches; ``track_fraction`` None keeps every hit (natural mix)."""
    sim, seed, number, track_fraction = job
    labelled = event_patches(sim.event(np.random.default_rng([seed, number])))
    if track_fraction is None:
        return labelled
    rng = np.random.default_rng([seed, number, 7])
    keep = (labelled.truth != TRUTH_TRACK) | labelled.michel | (rng.random(len(labelled)) < track_fraction)
    return labelled.take(np.flatnonzero(keep))


def simulate_parallel(sim: Simulation, seed: int, events: range, track_fraction: float | None,
                      workers: int) -> Labelled:
    """:func:`_event` over ``events`` in ``workers`` processes (event ``i`` uses the stream ``(seed, i)``,
    as :func:`.dataset.simulate` and the generator do)."""
    jobs = [(sim, seed, number, track_fraction) for number in events]
    with ProcessPoolExecutor(workers) as pool:
        return Labelled.concat(list(pool.map(_event, jobs)))


def load_weights(net: Any, weights: Weights) -> Any:
    """Copies numpy :class:`~.model.Weights` into a :func:`~.model.torch_model` network (inverse of
    :func:`~.model.weights_of`), so fine-tuning starts from an ONNX file."""
    import torch

    with torch.no_grad():
        for layer in ("conv", "dense1", "dense2", "em", "michel"):
            w = getattr(weights, f"{layer}_w")
            getattr(net, layer).weight.copy_(torch.from_numpy(w if layer == "conv" else np.ascontiguousarray(w.T)))
            getattr(net, layer).bias.copy_(torch.from_numpy(getattr(weights, f"{layer}_b")))
    return net


def predict(net: Any, patches: np.ndarray, device: str, batch: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """(em_trk_none, michel) of a torch network on uint8 patches (per-epoch validation on the device)."""
    import torch

    net.eval()
    em, michel = [], []
    with torch.no_grad():
        for lo in range(0, len(patches), batch):
            e, m = net(torch.from_numpy(patches[lo:lo + batch]).to(device))
            em.append(e.float().cpu().numpy())
            michel.append(m.float().cpu().numpy()[:, 0])
    return np.concatenate(em), np.concatenate(michel)


def best_f1_metrics(em: np.ndarray, michel: np.ndarray, sample: Labelled) -> dict[str, float]:
    """Metrics at the best-F1 Michel cut on ``sample`` (and the cut itself)."""
    order = np.argsort(-michel)
    true_positives = np.cumsum(sample.michel[order])
    best = int(np.argmax(2 * true_positives / (np.arange(1, len(order) + 1) + sample.michel.sum())))
    cut = float(michel[order][best]) - 1e-7
    return {**classification_metrics(em, michel, sample.truth, sample.michel, cut), "michel_cut": cut}


def f1(metrics: dict[str, float | None]) -> float:
    """The Michel F1 score; 0 where efficiency or purity is undefined (no true or no tagged Michel hit)."""
    e, p = metrics["michel_efficiency"], metrics["michel_purity"]
    return 0.0 if e is None or p is None else 2 * e * p / max(e + p, 1e-9)


def fit(net: Any, sample: Labelled, validation: Labelled, args: argparse.Namespace, device: str,
        log: Any = print) -> tuple[Any, str, list[dict[str, Any]]]:
    """Trains ``net`` in place (see the module docstring, step 2); returns it with the kept epoch's
    weights, which epoch that was, and the per-epoch validation history."""
    import torch

    em0, mi0 = predict(net, validation.patches, device)
    start_metrics = best_f1_metrics(em0, mi0, validation)
    log("start (validation, best-F1 cut):", json.dumps(start_metrics))
    floor = start_metrics["track_vs_shower_balanced_accuracy"] - 0.02
    counts = np.bincount(sample.truth, minlength=3).astype(np.float64)
    class_weight = torch.tensor(counts.sum() / (3 * np.maximum(counts, 1)), dtype=torch.float32, device=device)
    cross_entropy = torch.nn.CrossEntropyLoss(weight=class_weight)
    binary = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor([args.pos_weight], device=device))
    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr)
    patches = torch.from_numpy(sample.patches).to(device)
    truth = torch.from_numpy(sample.truth).to(device)
    michel = torch.from_numpy(sample.michel.astype(np.float32))[:, None].to(device)
    fit_start = time.monotonic()
    budget = 60 * args.minutes
    best: tuple[float, dict | None, str] = (f1(start_metrics), None, "start")
    history: list[dict[str, Any]] = []
    for epoch in range(args.epochs):
        net.train()
        order = torch.randperm(len(truth), device=device)
        losses = []
        for lo in range(0, len(order), args.batch):
            index = order[lo:lo + args.batch]
            x = patches[index]
            if args.flip:  # mirror symmetry of the wire and drift axes (cosmics are isotropic in both)
                for axis in (1, 2):
                    mirror = torch.rand(len(index), device=device) < 0.5
                    x = torch.where(mirror[:, None, None, None], x.flip(axis), x)
            elapsed = min(1.0, (time.monotonic() - fit_start) / budget)
            for group in optimizer.param_groups:  # cosine decay over the time budget
                group["lr"] = args.lr * 0.5 * (1 + np.cos(np.pi * elapsed))
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
                em_logits, michel_logits = net.logits(x)
            loss = cross_entropy(em_logits.float(), truth[index]) + \
                args.michel_weight * binary(michel_logits.float(), michel[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
            if elapsed >= 1.0:
                break
        em_v, mi_v = predict(net, validation.patches, device)
        metrics = best_f1_metrics(em_v, mi_v, validation)
        history.append({"epoch": epoch, "loss": float(torch.stack(losses).mean()), "michel_f1": f1(metrics), **metrics})
        log(json.dumps(history[-1]))
        if metrics["track_vs_shower_balanced_accuracy"] >= floor and f1(metrics) > best[0]:
            best = (f1(metrics), {k: v.detach().clone() for k, v in net.state_dict().items()}, f"epoch {epoch}")
        if time.monotonic() - fit_start >= budget:
            break
    if best[1] is not None:
        net.load_state_dict(best[1])
    return net, best[2], [{"start": start_metrics}, *history]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, help="ONNX file to write (its report next to it as .json)")
    parser.add_argument("--start", default=str(MODEL_FILE), help="ONNX file whose weights start the fit")
    parser.add_argument("--install", action="store_true", help="make the result the repository's model")
    parser.add_argument("--events", type=int, default=96, help="full-size training events")
    parser.add_argument("--first-event", type=int, default=0, help="number of the first training event")
    parser.add_argument("--flip", action="store_true", help="mirror patches in wire and drift at random")
    parser.add_argument("--track-fraction", type=float, default=0.3, help="fraction of track hits kept")
    parser.add_argument("--validation-events", type=int, default=3, help="full events of stream seed + 1000")
    parser.add_argument("--seed", type=int, default=11, help="random stream of the training events")
    parser.add_argument("--heldout-seed", type=int, default=12)
    parser.add_argument("--heldout-events", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=4.0, help="time budget of the fit")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--michel-weight", type=float, default=3.0, help="weight of the Michel loss")
    parser.add_argument("--pos-weight", type=float, default=3.0, help="BCE weight of Michel hits")
    parser.add_argument("--workers", type=int, default=15, help="simulation processes")
    args = parser.parse_args(argv)
    try:
        torch = require("torch", "fine-tuning EmTrkMichelId")
    except MissingDependency as err:
        parser.exit(1, f"{parser.prog}: error: {err}\n")

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    full = Simulation.preset("full")
    t0 = time.monotonic()
    sample = simulate_parallel(full, args.seed, range(args.first_event, args.first_event + args.events),
                               args.track_fraction, args.workers)
    validation = simulate_parallel(full, args.seed + 1000, range(args.validation_events), None, args.workers)
    heldout = simulate_parallel(full, args.heldout_seed, range(args.heldout_events), None, args.workers)
    # full geometry with fewer cosmics, as small held-out checks would use
    few = replace(full, scenario=replace(full.scenario, cosmics=15.0))
    heldout_few = simulate_parallel(few, 31, range(4), None, args.workers)
    print(f"simulated in {time.monotonic() - t0:.0f} s: training {len(sample)} patches "
          f"(truth {np.bincount(sample.truth, minlength=3).tolist()}, Michel {int(sample.michel.sum())}), "
          f"validation {len(validation)}, held-out {len(heldout)}", flush=True)

    net = load_weights(torch_model(), weights_from_onnx(Path(args.start).read_bytes())).to(device)
    net, kept, history = fit(net, sample, validation, args, device, log=lambda *a: print(*a, flush=True))
    weights = weights_of(net.cpu().eval())
    if weights.count() != PARAMETERS:
        raise AssertionError("EmTrkMichelId must have exactly 11,900,420 parameters")
    # the threshold from the int8 file itself, so the folded decision is the exported model's
    model, threshold = calibrate_michel(to_onnx(weights), validation)
    Path(args.output).write_bytes(model)
    report = {"route": "finetune", "start": str(args.start), "seed": args.seed,
              "events": [args.first_event, args.first_event + args.events], "track_fraction": args.track_fraction,
              "training_patches": len(sample), "training_michel": int(sample.michel.sum()), "kept": kept,
              "michel_threshold_folded": threshold, "history": history,
              "validation_seed": args.seed + 1000, "validation_events": args.validation_events,
              "validation": evaluate(model, validation),
              "heldout_seed": args.heldout_seed, "heldout_full_events": args.heldout_events,
              "heldout_full": evaluate(model, heldout),
              "heldout_cosmics15_seed31_4events": evaluate(model, heldout_few),
              "args": vars(args)}
    Path(args.output).with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("kept", "michel_threshold_folded", "validation", "heldout_full")},
                     indent=2))
    if args.install:  # the report becomes the entry's training.json; the one it replaces goes under "previous"
        cpu_entry, gpu_entry = install(model)
        record = cpu_entry / "training.json"
        previous = json.loads(record.read_text()) if record.exists() else None
        record.write_text(json.dumps({**report, "previous": previous}, indent=2) + "\n")
        print(f"installed {cpu_entry} and {gpu_entry}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
