"""Trains EmTrkMichelId on simulated patches and exports it to the project's model repositories.

::

    nice -n 10 python -m sonic_hep.data.protodune.train            # ~15 min on 2 busy cores

1. simulates ``--events`` small-scale events (one 1 m³ TPC; ``--cosmics`` muons, so that enough stop
   and give Michel electrons) and ``--full-events`` ProtoDUNE-size events (where most EM hits are
   cosmic delta rays and Michel electrons, not beam showers) of random stream ``--seed``, cuts a
   patch around every hit and balances the classes (:func:`~.dataset.balanced`; Michel hits
   repeated ``--michel-repeat`` times);
2. trains, for ``--minutes``, a **pooled stand-in** (:func:`~.model.pooled_model`: the same conv,
   then 4×4 average pooling before Dense-128, ~6× cheaper per patch on a CPU), expands it exactly
   into the full EmTrkMichelId (:func:`~.model.expand_pooled`), then fine-tunes the full network for
   ``--finetune-minutes``; losses: class-weighted cross-entropy on track/em/none plus binary
   cross-entropy on Michel; Adam; dropout 0.2;
3. keeps the better of the expanded and the fine-tuned network (balanced track-vs-shower accuracy)
   on validation events (random stream ``seed + 1000``), folds the best-F1 Michel threshold on those events into the Michel bias
   (:func:`calibrate_michel`), and exports the int8-weight ONNX file and both repository entries
   (:mod:`.export`);
4. evaluates **the exported ONNX file** with onnxruntime on ``--heldout-events`` small and
   ``--heldout-full-events`` full events of another random stream (all hits, natural class mix) and
   writes the metrics next to the model (``training.json``).

Needs torch (``pip install 'sonic-hep[train]'``); it runs on CPU in a few minutes.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from typing import Any

import numpy as np

from ...framework.extras import MissingDependency, require
from ...modules.protodune.metrics import classification_metrics
from .dataset import Labelled, simulate
from .export import MODELS, NAME, export
from .model import PARAMETERS, expand_pooled, pooled_model, to_onnx, weights_from_onnx, weights_of
from .simulate import Simulation


MODEL_FILE = MODELS / "protodune" / NAME / "1" / "model.onnx"


def train(net: Any, sample: Labelled, minutes: float, batch: int = 128, lr: float = 1e-3, seed: int = 0,
          log_every: int = 20) -> Any:
    """Trains ``net`` (a :func:`~.model.torch_model` or :func:`~.model.pooled_model`) in place for at
    most ``minutes`` or 4 epochs: class-weighted cross-entropy on track/em/none plus binary
    cross-entropy on Michel (positives weighted up to 20×); Adam."""
    import torch

    torch.manual_seed(seed)
    counts = np.bincount(sample.truth, minlength=3).astype(np.float64)
    class_weight = torch.tensor(counts.sum() / (3 * np.maximum(counts, 1)), dtype=torch.float32)
    michel_fraction = max(float(sample.michel.mean()), 1e-3)
    pos_weight = torch.tensor([min((1 - michel_fraction) / michel_fraction, 20.0)])
    cross_entropy = torch.nn.CrossEntropyLoss(weight=class_weight)
    binary = torch.nn.BCEWithLogitsLoss(pos_weight=pos_weight)
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    patches, truth = torch.from_numpy(sample.patches), torch.from_numpy(sample.truth)
    michel = torch.from_numpy(sample.michel.astype(np.float32))[:, None]
    deadline, step, start, running = time.monotonic() + 60 * minutes, 0, time.monotonic(), []
    net.train()
    for epoch in range(4):
        for index in np.array_split(rng.permutation(len(sample)), max(1, len(sample) // batch)):
            index = torch.from_numpy(index)
            em_logits, michel_logits = net.logits(patches[index])
            loss = cross_entropy(em_logits, truth[index]) + 0.5 * binary(michel_logits, michel[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            running.append(loss.item())
            if step % log_every == 0:
                print(f"epoch {epoch} step {step}: loss {np.mean(running[-log_every:]):.3f} "
                      f"({step * batch / (time.monotonic() - start):.0f} patches/s)", flush=True)
            if time.monotonic() > deadline:
                net.eval()
                return net
    net.eval()
    return net


def evaluate(onnx_model: bytes, sample: Labelled) -> dict[str, float]:
    """Metrics of an ONNX EmTrkMichelId on a labelled sample (onnxruntime, CPU)."""
    em, michel = scores(onnx_model, sample)
    return classification_metrics(em, michel, sample.truth, sample.michel)


def scores(onnx_model: bytes, sample: Labelled, batch: int = 1693) -> tuple[np.ndarray, np.ndarray]:
    """(em_trk_none, michel) of an ONNX EmTrkMichelId on a labelled sample (onnxruntime, CPU)."""
    import onnxruntime as ort

    session = ort.InferenceSession(onnx_model, providers=["CPUExecutionProvider"])
    em, michel = zip(*(session.run(None, {"patches": sample.patches[lo:lo + batch]})
                       for lo in range(0, len(sample), batch)))
    return np.concatenate(em), np.concatenate(michel)[:, 0]


def calibrate_michel(onnx_model: bytes, sample: Labelled) -> tuple[bytes, float]:
    """Moves the Michel decision to where it is best on ``sample`` (largest F1 at score 0.5).

    Training sees Michel hits repeated and up-weighted, which shifts the head's logit upwards: at 0.5
    it tags far too many hits. The threshold ``t`` with the best F1 on validation events is folded
    into the head's bias (``b -= logit(t)``), so ``michel > 0.5`` means ``score > t`` before.
    """
    _, michel = scores(onnx_model, sample)
    truth = sample.michel
    if not truth.any():
        return onnx_model, 0.5
    order = np.argsort(-michel)
    true_positives = np.cumsum(truth[order])
    f1 = 2 * true_positives / (np.arange(1, len(order) + 1) + truth.sum())
    best = int(np.argmax(f1))
    threshold = float(np.clip(0.5 * (michel[order][best] + michel[order][min(best + 1, len(order) - 1)]), 1e-6, 1 - 1e-6))
    weights = weights_from_onnx(onnx_model)
    weights.michel_b = weights.michel_b - np.float32(np.log(threshold / (1 - threshold)))
    return to_onnx(weights), threshold


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=60, help="small-scale training events")
    parser.add_argument("--full-events", type=int, default=16,
                        help="full-scale training events (cosmic delta rays and Michel electrons in numbers)")
    parser.add_argument("--full-event-patches", type=int, default=6000, help="balanced patches kept per full event")
    parser.add_argument("--minutes", type=float, default=11.0, help="time limit of the pooled training")
    parser.add_argument("--finetune-minutes", type=float, default=3.0, help="time limit of the full fine-tuning")
    parser.add_argument("--finetune-lr", type=float, default=2e-4)
    parser.add_argument("--validation-events", type=int, default=8,
                        help="events (seed + 1000) choosing the model and calibrating the Michel decision")
    parser.add_argument("--recalibrate", action="store_true",
                        help="skip training: recalibrate the Michel decision of the repository's model")
    parser.add_argument("--seed", type=int, default=11, help="random stream of the training events")
    parser.add_argument("--heldout-seed", type=int, default=12, help="random stream of the held-out events")
    parser.add_argument("--heldout-events", type=int, default=8)
    parser.add_argument("--heldout-full-events", type=int, default=2)
    parser.add_argument("--cosmics", type=float, default=8.0,
                        help="mean cosmic muons per small event (more stopping muons, so more Michel electrons)")
    parser.add_argument("--michel-repeat", type=int, default=2, help="times each Michel hit appears in training")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    args = parser.parse_args(argv)
    try:
        torch = require("torch", "training EmTrkMichelId")
    except MissingDependency as err:
        parser.exit(1, f"{parser.prog}: error: {err}\n")

    torch.set_num_threads(args.threads)
    small = Simulation.preset("small")
    sim = replace(small, scenario=replace(small.scenario, cosmics=args.cosmics))
    full = Simulation.preset("full")
    validation = Labelled.concat([simulate(sim, args.seed + 1000, range(args.validation_events)),
                                  simulate(full, args.seed + 1000, range(1))])
    if args.recalibrate:  # only redo the Michel calibration of the model in the repository
        previous = json.loads((MODEL_FILE.parents[1] / "training.json").read_text())
        chosen = previous.get("chosen", "repository")
        report_extra = {k: v for k, v in previous.items() if k.startswith(("training", "minutes", "finetune",
                                                                           "validation_before"))}
        onnx_model = MODEL_FILE.read_bytes()
    else:
        start = time.monotonic()
        sample = Labelled.concat([simulate(sim, args.seed, range(args.events), balance=True),
                                  simulate(full, args.seed, range(args.full_events), balance=True,
                                           limit=args.full_event_patches)])
        michel = np.flatnonzero(sample.michel)  # rare (~1 %): repeated so the Michel head sees enough of them
        sample = sample.take(np.concatenate([np.arange(len(sample)), np.repeat(michel, args.michel_repeat - 1)]))
        print(f"{len(sample)} training patches from {args.events} small and {args.full_events} full events "
              f"in {time.monotonic() - start:.0f} s; "
              f"truth counts {np.bincount(sample.truth, minlength=3).tolist()}, Michel {int(sample.michel.sum())}")
        pooled = train(pooled_model(), sample, args.minutes)
        candidates = {"pooled": to_onnx(weights_of(expand_pooled(pooled)))}
        if args.finetune_minutes > 0:
            tuned = train(expand_pooled(pooled), sample, args.finetune_minutes, lr=args.finetune_lr, seed=1)
            candidates["fine-tuned"] = to_onnx(weights_of(tuned))
        validated = {name: evaluate(model, validation) for name, model in candidates.items()}
        chosen = max(validated, key=lambda name: validated[name]["track_vs_shower_balanced_accuracy"])
        print("validation:", json.dumps(validated), "→ keeping", chosen)
        onnx_model = candidates[chosen]
        report_extra = {"training_events": args.events, "training_full_events": args.full_events,
                        "training_patches": len(sample), "minutes": args.minutes,
                        "finetune_minutes": args.finetune_minutes, "validation_before_calibration": validated}
    onnx_model, threshold = calibrate_michel(onnx_model, validation)
    print(f"Michel decision moved to score {threshold:.3f} (now 0.5)")
    if weights_from_onnx(onnx_model).count() != PARAMETERS:
        raise AssertionError("EmTrkMichelId must have exactly 11,900,420 parameters")
    cpu_entry, gpu_entry = export(onnx_model)
    metrics = evaluate(onnx_model, simulate(sim, args.heldout_seed, range(args.heldout_events)))
    metrics_full = evaluate(onnx_model, simulate(full, args.heldout_seed, range(args.heldout_full_events)))
    report = {"simulation": sim.settings()["scenario"], "seed": args.seed, "chosen": chosen, **report_extra,
              "validation_events": args.validation_events, "michel_threshold_folded": threshold,
              "heldout_seed": args.heldout_seed, "heldout_events": args.heldout_events, "heldout": metrics,
              "heldout_full_events": args.heldout_full_events, "heldout_full": metrics_full}
    (cpu_entry / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"wrote {cpu_entry} and {gpu_entry}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
