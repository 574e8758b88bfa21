"""Training loops of the three Exa.TrkX stages (torch, CPU, minutes on a laptop-class core).

Each stage trains on what the previous one produces, as in Exa.TrkX: the embedding on hit pairs,
the filter on the radius graphs built with the trained embedding, the GNN on the graphs the filter
keeps. Graph building and edge selection use the same numpy code as the workflow
(:mod:`sonic_hep.modules.exatrkx`), so the GNN learns on exactly the graphs it will see.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
import torch
from scipy.spatial import cKDTree

from ...modules.exatrkx.truth import edge_truth
from .dataset import TrainingEvent
from .models import EmbeddingNet, FilterNet, InteractionGNN

log = logging.getLogger(__name__)


def _epochs(name: str, epochs: int, events: list, step: Callable[[object], float], model: torch.nn.Module,
            lr: float, seed: int) -> None:
    """Runs ``epochs`` passes over ``events`` (shuffled) with Adam and a cosine learning-rate decay."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, epochs * len(events)))
    rng = np.random.default_rng(seed)
    model.train()
    for epoch in range(epochs):
        start, losses = time.perf_counter(), []
        for i in rng.permutation(len(events)):
            optimizer.zero_grad()
            losses.append(step(events[i]))
            optimizer.step()
            schedule.step()
        log.info("%s epoch %d/%d: loss %.4f (%.1f s)", name, epoch + 1, epochs, float(np.mean(losses)),
                 time.perf_counter() - start)
    model.eval()


def train_embedding(events: list[TrainingEvent], epochs: int = 12, margin: float = 1.0, random_pairs: int = 3,
                    hard_k: int = 12, lr: float = 2e-3, seed: int = 1) -> EmbeddingNet:
    """Metric learning: true edges pulled together (d²), other pairs pushed beyond ``margin`` (hinge).

    Negatives are random pairs plus, each step, each hit's ``hard_k`` nearest neighbours in the
    current embedding that are not from its particle (the pairs the radius graph would wrongly keep).
    """
    torch.manual_seed(seed)
    model = EmbeddingNet()
    rng = np.random.default_rng(seed)

    def step(event: TrainingEvent) -> float:
        x = torch.from_numpy(event.features)
        n = len(x)
        with torch.no_grad():
            current = model(x).numpy()
        _, knn = cKDTree(current).query(current, k=min(hard_k + 1, n))
        hard = np.stack([np.repeat(np.arange(n), knn.shape[1]), knn.reshape(-1)])
        rand = rng.integers(0, n, size=(2, random_pairs * event.truth_edges.shape[1]))
        negatives = np.concatenate([hard, rand], axis=1)
        negatives = negatives[:, ~edge_truth(negatives, event.particle) & (negatives[0] != negatives[1])]
        emb = model(x)
        pos = torch.from_numpy(event.truth_edges)
        neg = torch.from_numpy(negatives)
        d_pos = (emb[pos[0]] - emb[pos[1]]).pow(2).sum(1)
        d_neg = (emb[neg[0]] - emb[neg[1]]).pow(2).sum(1).add(1e-12).sqrt()
        loss = d_pos.mean() + torch.relu(margin - d_neg).pow(2).mean()
        loss.backward()
        return float(loss.detach())

    _epochs("embedding", epochs, events, step, model, lr, seed)
    return model


def _edge_step(model: torch.nn.Module, features: np.ndarray, edges: np.ndarray, truth: np.ndarray,
               max_fake: int | None, rng: np.random.Generator, pos_weight: float) -> float:
    """One BCE step on an event's edges (fake edges subsampled to ``max_fake``), positives up-weighted."""
    if max_fake is not None and (~truth).sum() > max_fake:
        fake = np.flatnonzero(~truth)
        keep = np.concatenate([np.flatnonzero(truth), rng.choice(fake, max_fake, replace=False)])
        edges, truth = edges[:, keep], truth[keep]
    logits = model.logits(torch.from_numpy(features), torch.from_numpy(edges))
    target = torch.from_numpy(truth.astype(np.float32))
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target,
                                                                pos_weight=torch.tensor(pos_weight))
    loss.backward()
    return float(loss.detach())


def train_filter(events: list[TrainingEvent], graphs: list[np.ndarray], epochs: int = 8, max_fake: int = 30000,
                 pos_weight: float = 2.0, lr: float = 2e-3, seed: int = 2) -> FilterNet:
    """Edge classifier on the radius graphs (``graphs[i]``: int64 [2, E] of event i)."""
    torch.manual_seed(seed)
    model = FilterNet()
    rng = np.random.default_rng(seed)
    examples = [(e.features, g, edge_truth(g, e.particle)) for e, g in zip(events, graphs)]
    _epochs("filter", epochs, examples, lambda ex: _edge_step(model, *ex, max_fake, rng, pos_weight),
            model, lr, seed)
    return model


def train_gnn(events: list[TrainingEvent], graphs: list[np.ndarray], epochs: int = 10, pos_weight: float = 1.0,
              lr: float = 2e-3, seed: int = 3, **kwargs) -> InteractionGNN:
    """Interaction network on the filtered graphs."""
    torch.manual_seed(seed)
    model = InteractionGNN(**kwargs)
    rng = np.random.default_rng(seed)
    examples = [(e.features, g, edge_truth(g, e.particle)) for e, g in zip(events, graphs)]
    _epochs("gnn", epochs, examples, lambda ex: _edge_step(model, *ex, None, rng, pos_weight), model, lr, seed)
    return model


def predict(model: torch.nn.Module, events: list[TrainingEvent], graphs: list[np.ndarray] | None = None) -> list[np.ndarray]:
    """The model's outputs per event (embeddings, or edge scores when ``graphs`` are given)."""
    out = []
    with torch.no_grad():
        for i, event in enumerate(events):
            x = torch.from_numpy(event.features)
            out.append((model(x) if graphs is None else model(x, torch.from_numpy(graphs[i]))).numpy())
    return out
