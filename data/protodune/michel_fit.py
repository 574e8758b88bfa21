"""Fits the MichelHits combination (modules/protodune/michel.py) for the repository's EmTrkMichelId.

::

    nice -n 10 python -m sonic_hep.data.protodune.michel_fit      # ~10 min on 2 cores (onnxruntime)

1. simulates full-size events of three random streams that training never used for fitting: the
   **fit** events (stream ``--fit-seed``, 1011: the fine-tune's validation stream), the **decision**
   events (``--decision-seed``, 2011: never used by anything else) and the **held-out** events
   (``--heldout-seed``, 12), and scores every hit with the ONNX model (onnxruntime, as direct mode);
2. fits a logistic regression of the Michel truth on :data:`~sonic_hep.modules.protodune.michel.FEATURES`
   (Newton's method, a small L2 penalty, on standardised features; the weights are then written for
   the raw features) on the fit events;
3. on the decision events, takes the cut with the best Michel F1 and folds it into the bias, so that
   ``michel > 0.5`` is the working point;
4. reports efficiency and purity at 0.5 on the held-out events (also per event, and the CNN's own
   score at its 0.5 decision for comparison) — the held-out events choose nothing — and writes the
   report to ``data/models/protodune/emtrkmichelid/michel_hits.json``. The weights it prints are
   :data:`~sonic_hep.modules.protodune.michel.WEIGHTS`, the producer's default.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from ...modules.protodune.metrics import MichelRates
from ...modules.protodune.michel import FEATURES, combine, hit_features
from .dataset import event_patches
from .export import MODELS, NAME
from .simulate import Simulation
from .train import MODEL_FILE, scores

REPORT = MODELS / "protodune" / NAME / "michel_hits.json"


def scored_events(model: bytes, sim: Simulation, seed: int, events: range) -> list[dict[str, np.ndarray]]:
    """Per event: the MichelHits features of every hit, the CNN's Michel score and the Michel truth."""
    out = []
    for number in events:
        event = sim.event(np.random.default_rng([seed, number]))
        hit = event["Hit"]
        em, michel = scores(model, event_patches(event))
        cnn = {"track": em[:, 0], "em": em[:, 1], "michel": michel}
        out.append({"features": hit_features(hit["tpc"], hit["plane"], hit["wire"], hit["peak_tick"], cnn),
                    "cnn": michel, "truth": hit["michel"].astype(bool)})
    return out


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-3, steps: int = 30) -> np.ndarray:
    """Weights (bias first) of a logistic regression of ``y`` on ``x``, for the raw (unstandardised) ``x``."""
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = np.concatenate([np.ones((len(x), 1)), (x - mean) / scale], axis=1)
    w = np.zeros(z.shape[1])
    for _ in range(steps):  # Newton's method (iteratively reweighted least squares)
        p = 0.5 * (1 + np.tanh(0.5 * (z @ w)))
        gradient = z.T @ (p - y) + l2 * w
        hessian = (z * (p * (1 - p))[:, None]).T @ z + l2 * np.eye(len(w))
        w -= np.linalg.solve(hessian, gradient)
    raw = w[1:] / scale
    return np.concatenate([[w[0] - raw @ mean], raw])


def best_f1_cut(score: np.ndarray, truth: np.ndarray) -> float:
    """The score cut with the largest F1 (midway between the two scores around it)."""
    order = np.argsort(-score)
    true_positives = np.cumsum(truth[order])
    best = int(np.argmax(2 * true_positives / (np.arange(1, len(order) + 1) + truth.sum())))
    return float(0.5 * (score[order][best] + score[order][min(best + 1, len(order) - 1)]))


def efficiency_purity(tagged_truth: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    """Michel efficiency and purity summed over events (and their counts), from (tagged, truth) pairs; a rate
    with nothing to divide by is None (null in the report)."""
    rates = sum((MichelRates.of(tagged, truth) for tagged, truth in tagged_truth), MichelRates(0, 0, 0))
    return {"michel_efficiency": rates.efficiency, "michel_purity": rates.purity, "michel_hits": rates.true,
            "tagged_hits": rates.tagged}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(MODEL_FILE), help="EmTrkMichelId ONNX file")
    parser.add_argument("--fit-seed", type=int, default=1011)
    parser.add_argument("--fit-events", type=int, default=6)
    parser.add_argument("--decision-seed", type=int, default=2011)
    parser.add_argument("--decision-events", type=int, default=6)
    parser.add_argument("--heldout-seed", type=int, default=12)
    parser.add_argument("--heldout-events", type=int, default=10)
    parser.add_argument("--report", default=str(REPORT), help="JSON report to write")
    args = parser.parse_args(argv)
    model = Path(args.model).read_bytes()
    full = Simulation.preset("full")
    start = time.monotonic()
    fit, decision, heldout = (scored_events(model, full, seed, range(n)) for seed, n in (
        (args.fit_seed, args.fit_events), (args.decision_seed, args.decision_events),
        (args.heldout_seed, args.heldout_events)))
    print(f"simulated and scored {args.fit_events + args.decision_events + args.heldout_events} full events "
          f"in {time.monotonic() - start:.0f} s", flush=True)
    weights = fit_logistic(np.concatenate([e["features"] for e in fit]),
                           np.concatenate([e["truth"] for e in fit]).astype(np.float64))
    cut = best_f1_cut(combine(np.concatenate([e["features"] for e in decision]), weights),
                      np.concatenate([e["truth"] for e in decision]))
    cut = float(np.clip(cut, 1e-6, 1 - 1e-6))
    weights[0] -= np.log(cut / (1 - cut))  # the decision becomes michel > 0.5

    def at_half(sample: list[dict[str, np.ndarray]], combined: bool) -> list[tuple[np.ndarray, np.ndarray]]:
        return [((combine(e["features"], weights) if combined else e["cnn"]) > 0.5, e["truth"]) for e in sample]

    report = {
        "model_md5": __import__("hashlib").md5(model).hexdigest(), "features": list(FEATURES),
        "weights": [round(float(w), 6) for w in weights], "decision_cut_folded": cut,
        "fit": {"seed": args.fit_seed, "events": args.fit_events},
        "decision": {"seed": args.decision_seed, "events": args.decision_events,
                     "michel_hits": efficiency_purity(at_half(decision, True)),
                     "cnn": efficiency_purity(at_half(decision, False))},
        "heldout": {"seed": args.heldout_seed, "events": args.heldout_events,
                    "michel_hits": efficiency_purity(at_half(heldout, True)),
                    "cnn": efficiency_purity(at_half(heldout, False)),
                    "per_event": [efficiency_purity([pair]) for pair in at_half(heldout, True)]},
    }
    Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("weights", "decision_cut_folded", "decision")}, indent=1))
    print("held-out:", json.dumps({k: report["heldout"][k] for k in ("seed", "events", "michel_hits", "cnn")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
