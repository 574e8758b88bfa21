"""Fitting the MiniAOD models on prepared samples (PyTorch + numpy only, CPU or GPU).

Kept free of the ROOT stack so it runs wherever PyTorch does::

    python -m sonic_hep.data.miniaod.train fit --cache work/miniaod --weights work/miniaod --device cuda
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from .samples import AK4_LABELS, AK8_LABELS, TAU_BLOCKS, TAU_GRID_NAMES, JetSample, MetSample, TauSample

Log = Callable[[str], None]


def auc(scores: np.ndarray, signal: np.ndarray) -> float:
    """Area under the ROC curve (Mann–Whitney), ``signal`` entries against the others."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(scores.size)
    ranks[order] = np.arange(1, scores.size + 1)
    n_sig, n_bkg = int(signal.sum()), int((~signal).sum())
    if n_sig == 0 or n_bkg == 0:
        return float("nan")
    return float((ranks[signal].sum() - n_sig * (n_sig + 1) / 2) / (n_sig * n_bkg))


def resolution(pred: np.ndarray, truth: np.ndarray) -> float:
    """MET resolution: RMS of (predicted − true) over x and y, in GeV (inputs in units of 50 GeV)."""
    return float(np.sqrt(np.mean((pred - truth) ** 2)) * 50.0)


def split(n: int, fraction: float = 0.2, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Random (train, validation) indices."""
    order = np.random.default_rng(seed).permutation(n)
    cut = int(n * (1 - fraction))
    return np.sort(order[:cut]), np.sort(order[cut:])


def class_weights(labels: np.ndarray, n_classes: int) -> np.ndarray:
    """Inverse class frequencies (each class weighs the same in the loss), capped at 10."""
    counts = np.bincount(labels, minlength=n_classes).astype(float)
    return np.clip(np.where(counts > 0, counts.sum() / np.maximum(counts, 1) / n_classes, 0.0), 0.0, 10.0)


def _tensors(arrays, device: str) -> list:
    import torch

    return [torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in arrays]


def fit(model, batch: Callable[[np.ndarray], list[np.ndarray]], targets: np.ndarray, train: np.ndarray,
        loss_fn: Callable, epochs: int, batch_size: int, lr: float, device: str, log: Log, seed: int = 1) -> None:
    """Minimises ``loss_fn(model, inputs, target)`` with AdamW and a one-cycle learning rate."""
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model.to(device)
    steps = epochs * math.ceil(train.size / batch_size)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    for epoch in range(epochs):
        model.train()
        start, total = time.perf_counter(), 0.0
        order = train[rng.permutation(train.size)]
        for first in range(0, order.size, batch_size):
            index = np.sort(order[first:first + batch_size])
            inputs = _tensors(batch(index), device)
            target = torch.from_numpy(targets[index]).to(device)
            opt.zero_grad()
            loss = loss_fn(model, inputs, target)
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.detach()) * index.size
        log(f"  epoch {epoch + 1}/{epochs}: loss {total / train.size:.4f} ({time.perf_counter() - start:.1f} s)")
    model.to("cpu").eval()


def predict(model, batch: Callable[[np.ndarray], list[np.ndarray]], index: np.ndarray, batch_size: int = 512,
            device: str = "cpu") -> np.ndarray:
    import torch

    model.to(device).eval()
    out = []
    with torch.no_grad():
        for first in range(0, index.size, batch_size):
            out.append(model(*_tensors(batch(index[first:first + batch_size]), device)).cpu().numpy())
    model.to("cpu")
    return np.concatenate(out)


def particlenet_model(which: str, n_pf: int, n_sv: int):
    from .models import ParticleNet

    labels = AK4_LABELS if which == "ak4" else AK8_LABELS
    if which == "ak4":
        return ParticleNet(n_pf, n_sv, len(labels), k=8, blocks=((32, 32, 32), (64, 64, 64)))
    return ParticleNet(n_pf, n_sv, len(labels), k=16, blocks=((48, 48, 48), (96, 96, 96)))


def particlenet_metrics(which: str, probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """b vs light (uds, g) AUC for AK4, top vs QCD for AK8, on the first class's probability."""
    if which == "ak4":
        use = (labels == 0) | (labels == 2) | (labels == 3)
        return {"auc_b_vs_light": auc(probs[use, 0], labels[use] == 0)}
    use = (labels == 0) | (labels == 2)
    tvsqcd = probs[:, 0] / np.maximum(probs[:, 0] + probs[:, 2], 1e-12)  # CMS's TvsQCD, as configs/miniaod.yaml
    return {"auc_top_vs_qcd": auc(tvsqcd[use], labels[use] == 0)}


#: validation fraction per model: AK8 keeps 90 % of its jets for training (boosted tops are the
#: expensive sample; 10 % still validates on several hundred tops, and the physics test on held-out seeds)
VALIDATION_FRACTION = {"ak4": 0.2, "ak8": 0.1}


def fit_particlenet(which: str, sample: JetSample, epochs: int, device: str, log: Log):
    import torch

    train, val = split(len(sample), VALIDATION_FRACTION[which])
    model = particlenet_model(which, sample.pf.shape[1], sample.sv.shape[1])
    n_classes = len(AK4_LABELS if which == "ak4" else AK8_LABELS)
    weight = torch.tensor(class_weights(sample.labels[train], n_classes), dtype=torch.float32, device=device)

    def loss(m, inputs, target):
        return torch.nn.functional.cross_entropy(m.logits(*inputs), target, weight=weight)

    fit(model, sample.batch, sample.labels, train, loss, epochs, 256, 5e-3, device, log)
    metrics = particlenet_metrics(which, predict(model, sample.batch, val, device=device), sample.labels[val])
    labels = AK4_LABELS if which == "ak4" else AK8_LABELS
    counts = np.bincount(sample.labels[train], minlength=len(labels)).tolist()
    return model, {"jets": len(sample), "training_jets_per_class": dict(zip(labels, counts)),
                   "validation_jets": int(val.size), **metrics}


def fit_deepmet(sample: MetSample, epochs: int, device: str, log: Log):
    import torch

    from .models import DeepMET

    train, val = split(len(sample))
    model = DeepMET()

    def loss(m, inputs, target):
        return torch.nn.functional.huber_loss(m(*inputs), target, delta=0.5)

    fit(model, sample.batch, sample.target, train, loss, epochs, 32, 3e-3, device, log)
    pred = predict(model, sample.batch, val, 64, device)
    return model, {"events": len(sample), "resolution_deepmet_gev": resolution(pred, sample.target[val]),
                   "resolution_pf_gev": resolution(sample.pf_met[val], sample.target[val]),
                   "resolution_puppi_gev": resolution(sample.puppi_met[val], sample.target[val])}


def set_standardisation(model, sample: TauSample, train: np.ndarray) -> None:
    """Means and RMS of the τ block and of every grid channel (occupied cells only) on ``train``."""
    import torch

    selected = np.zeros(len(sample), dtype=bool)
    selected[train] = True

    def assign(norm, values: np.ndarray) -> None:
        mean = values.mean(axis=0) if len(values) else np.zeros(values.shape[1])
        rms = values.std(axis=0) if len(values) else np.ones(values.shape[1])
        norm.mean.copy_(torch.tensor(mean, dtype=torch.float32))
        norm.rms.copy_(torch.tensor(np.where(rms > 1e-6, rms, 1.0), dtype=torch.float32))

    assign(model.tau_norm, sample.tau[train])
    for name in TAU_GRID_NAMES:
        grid, block = name.split("_")[1:]
        tower = model.inner if grid == "inner" else model.outer
        t, _, _, values = sample.cells[name]
        assign(tower.norms[list(TAU_BLOCKS).index(block)], values[selected[t]])


def tau_metrics(probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """τ vs e, μ and jet AUCs of CMS's discriminants τ/(τ + e), τ/(τ + μ), τ/(τ + jet)."""
    out = {}
    for name, other in (("e", 0), ("mu", 1), ("jet", 3)):
        use = (labels == 2) | (labels == other)
        vs = probs[:, 2] / np.maximum(probs[:, 2] + probs[:, other], 1e-12)
        out[f"auc_tau_vs_{name}"] = auc(vs[use], labels[use] == 2)
    return out


def fit_deeptau(sample: TauSample, epochs: int, device: str, log: Log):
    import torch

    from .models import DeepTau

    train, val = split(len(sample))
    model = DeepTau()
    set_standardisation(model, sample, train)
    weight = torch.tensor(class_weights(sample.labels[train], 4), dtype=torch.float32, device=device)

    def loss(m, inputs, target):
        return torch.nn.functional.cross_entropy(m.logits(*inputs), target, weight=weight)

    fit(model, sample.batch, sample.labels, train, loss, epochs, 128, 3e-3, device, log)
    metrics = tau_metrics(predict(model, sample.batch, val, 256, device), sample.labels[val])
    counts = dict(zip(("e", "mu", "tau", "jet"), np.bincount(sample.labels[train], minlength=4).tolist()))
    return model, {"taus": len(sample), "training_taus_per_class": counts, "validation_taus": int(val.size),
                   **metrics}
