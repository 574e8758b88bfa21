"""Trains the Exa.TrkX models on generated events and writes the Triton repository.

    sonic data generate exatrkx --events 150 --seed 11 --output train.root
    sonic data generate exatrkx --events 30 --seed 12 --output validation.root
    nice -n 10 python -m sonic_hep.data.exatrkx.train --train train.root --validation validation.root \\
        --out data/models/exatrkx --work /tmp/exatrkx-work --max-events 80

(the committed models: 80 training events, epochs 6/10/20; about 10 CPU-minutes on an idle core).

Stage by stage (each trained on what the previous one produces), with the working point chosen on
the validation events through the exported ONNX models and the workflow's own numpy code:

1. embedding → radius: the smallest radius keeping ``--graph-efficiency`` of the true edges;
2. filter → cut: the largest cut keeping ``--filter-efficiency`` of the same-particle edges;
3. GNN → cut: the one with the best tracking efficiency among those with a fake rate below 2%.

``--work`` keeps each trained stage (``*.pt``) so an interrupted run resumes. Needs torch.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from ...framework.extras import MissingDependency, require
from ...modules.exatrkx.edge_selection import select_edges
from ...modules.exatrkx.graph_building import radius_graph
from ...modules.exatrkx.labeling import label_tracks
from ...modules.exatrkx.matching import MatchCounts, match_tracks
from ...modules.exatrkx.track_parameters import track_parameters
from ...modules.exatrkx.truth import edge_efficiency, edge_truth
from .dataset import TrainingEvent, read_events
from .export import write_repository

log = logging.getLogger("exatrkx.train")

K_MAX = 32
RADII = (0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2)
FILTER_CUTS = tuple(np.round(np.arange(0.02, 0.6, 0.02), 2))
GNN_CUTS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95)
MIN_HITS = 3


def _session(onnx: bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(onnx, options, providers=["CPUExecutionProvider"])


def _stage(work: Path, name: str, factory, train):
    """Loads ``work/name.pt`` into ``factory()`` or trains and saves it."""
    import torch

    path = work / f"{name}.pt"
    if path.exists():
        model = factory()
        model.load_state_dict(torch.load(path))
        model.eval()
        log.info("%s: loaded %s", name, path)
        return model
    start = time.perf_counter()
    model = train()
    torch.save(model.state_dict(), path)
    log.info("%s: trained in %.0f s", name, time.perf_counter() - start)
    return model


def _score(session: ort.InferenceSession, event: TrainingEvent, edges: np.ndarray) -> np.ndarray:
    if edges.shape[1] == 0:
        return np.zeros(0, np.float32)
    return session.run(None, {"features": event.features, "edge_index": edges})[0]


def track_metrics(events: list[TrainingEvent], edges: list[np.ndarray], scores: list[np.ndarray], cut: float
                  ) -> MatchCounts:
    """Tracking performance of labeling at ``cut`` (summed over events)."""
    total = MatchCounts()
    for event, e, s in zip(events, edges, scores):
        labels = label_tracks(len(event.features), e, s, cut, MIN_HITS)
        tracks = track_parameters(event.x, event.y, event.z, labels)
        counts, _ = match_tracks(labels, event.particle, event.particle_pt, event.particle_primary, tracks["pt"])
        total = total + counts
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", required=True, help="ROOT file of training events")
    parser.add_argument("--validation", required=True, help="ROOT file of validation events (working point)")
    parser.add_argument("--out", required=True, help="repository directory to write (e.g. data/models/exatrkx)")
    parser.add_argument("--work", default="exatrkx-work", help="directory for the trained stages (*.pt)")
    parser.add_argument("--max-events", type=int, default=None, help="training events to use")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--epochs", type=int, nargs=3, default=(6, 10, 20), metavar=("EMB", "FILTER", "GNN"))
    parser.add_argument("--graph-efficiency", type=float, default=0.99)
    parser.add_argument("--filter-efficiency", type=float, default=0.99)
    args = parser.parse_args(argv)
    try:
        torch = require("torch", "training the Exa.TrkX models")
    except MissingDependency as err:
        parser.exit(1, f"{parser.prog}: error: {err}\n")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    from .models import EmbeddingNet, FilterNet, InteractionGNN, export_onnx
    from .training import predict, train_embedding, train_filter, train_gnn

    torch.set_num_threads(args.threads)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    train = read_events(args.train, args.max_events)
    val = read_events(args.validation)
    log.info("%d training events (%.0f hits each), %d validation events", len(train),
             np.mean([len(e.features) for e in train]), len(val))
    dyn_nodes = {"features": {0: "hits"}}
    dyn_edges = {"features": {0: "hits"}, "edge_index": {1: "edges"}, "score": {0: "edges"}}

    # 1. embedding and radius
    embedding = _stage(work, "embedding", EmbeddingNet, lambda: train_embedding(train, epochs=args.epochs[0]))
    onnx = {"embedding": export_onnx(embedding, (torch.from_numpy(val[0].features),), ["features"], ["embedding"],
                                     {**dyn_nodes, "embedding": {0: "hits"}})}
    session = _session(onnx["embedding"])
    val_emb = [session.run(None, {"features": e.features})[0] for e in val]
    radius = RADII[-1]
    for r in RADII:
        graphs = [radius_graph(x, r, K_MAX) for x in val_emb]
        eff = np.mean([edge_efficiency(g, e.truth_edges, len(e.features)) for g, e in zip(graphs, val)])
        size = np.mean([g.shape[1] / len(e.features) for g, e in zip(graphs, val)])
        log.info("graph building r=%.2f: true-edge efficiency %.4f, %.1f edges per hit", r, eff, size)
        if eff >= args.graph_efficiency:
            radius = r
            break
    @functools.cache
    def train_graphs() -> list[np.ndarray]:
        return [radius_graph(x, radius, K_MAX) for x in predict(embedding, train)]

    val_graphs = [radius_graph(x, radius, K_MAX) for x in val_emb]

    # 2. filter and its cut
    filt = _stage(work, "filter", FilterNet, lambda: train_filter(train, train_graphs(), epochs=args.epochs[1]))
    example = (torch.from_numpy(val[0].features), torch.from_numpy(val_graphs[0]))
    onnx["filter"] = export_onnx(filt, example, ["features", "edge_index"], ["score"], dyn_edges)
    session = _session(onnx["filter"])
    val_filter = [_score(session, e, g) for e, g in zip(val, val_graphs)]
    truth = [edge_truth(g, e.particle) for g, e in zip(val_graphs, val)]
    filter_cut = FILTER_CUTS[0]
    for cut in FILTER_CUTS:
        kept = np.sum([(s >= cut)[t].sum() for s, t in zip(val_filter, truth)]) / np.sum([t.sum() for t in truth])
        if kept < args.filter_efficiency:
            break
        filter_cut = cut
    purity = np.sum([t[s >= filter_cut].sum() for s, t in zip(val_filter, truth)]) / \
        np.sum([(s >= filter_cut).sum() for s in val_filter])
    log.info("filter cut %.2f: %.1f edges per hit left, purity %.3f", filter_cut,
             np.mean([(s >= filter_cut).sum() / len(e.features) for s, e in zip(val_filter, val)]), purity)

    def train_filtered() -> list[np.ndarray]:
        graphs = train_graphs()
        return [select_edges(g, s, filter_cut)[0] for g, s in zip(graphs, predict(filt, train, graphs))]

    val_filtered = [select_edges(g, s, filter_cut)[0] for g, s in zip(val_graphs, val_filter)]

    # 3. GNN and its cut
    gnn = _stage(work, "gnn", InteractionGNN, lambda: train_gnn(train, train_filtered(), epochs=args.epochs[2]))
    example = (torch.from_numpy(val[0].features), torch.from_numpy(val_filtered[0]))
    onnx["gnn"] = export_onnx(gnn, example, ["features", "edge_index"], ["score"], dyn_edges)
    session = _session(onnx["gnn"])
    val_gnn = [_score(session, e, g) for e, g in zip(val, val_filtered)]
    best, gnn_cut = None, 0.5
    for cut in GNN_CUTS:
        m = track_metrics(val, val_filtered, val_gnn, cut)
        log.info("GNN cut %.2f: %s", cut, m.summary(1.0))
        if m.fake_rate <= 0.02 and (best is None or m.efficiency > best.efficiency):
            best, gnn_cut = m, cut

    point = {"graph_building": {"radius": radius, "k_max": K_MAX}, "edge_selection": {"cut": filter_cut},
             "labeling": {"cut": gnn_cut, "min_hits": MIN_HITS}}
    write_repository(args.out, onnx, point)
    log.info("wrote %s with working point %s", args.out, point)
    log.info("validation (%d events): %s", len(val), track_metrics(val, val_filtered, val_gnn, gnn_cut).summary(1.0))
    for name, data in onnx.items():
        log.info("exatrkx_%s: %.0f kB", name, len(data) / 1024)
    return 0


if __name__ == "__main__":
    sys.exit(main())
