"""The project's MiniAOD models (PyTorch; needed only to train and export — running needs onnxruntime).

* :class:`ParticleNet` — EdgeConv blocks on the jet's particle cloud (PF candidates and SVs embedded to a
  common width and joined as CMS's ParticleNet-with-SV does), masked average pooling, softmax over
  jet classes. Padded points are moved far away (+1e9) in every EdgeConv's kNN coordinates (the
  first's (η, φ) and the later ones' features), as CMS does, so they are never anyone's neighbours and
  a jet's score does not depend on how far it is padded.
* :class:`DeepMET` — a per-candidate network (DeepMET v1 style: embeddings of charge, pdgId, fromPV
  joined to the continuous inputs) with an event-context term, giving each candidate a weight in
  [0, 2]; MET = −Σ w·(px, py), in the inputs' units of 50 GeV.
* :class:`DeepTau` — standardisation of every input (means/RMS measured on the training set, stored
  in the model), per-block 1×1 convolutions of the inner and outer grids, a few 3×3 convolutions,
  pooling, and dense layers with the τ block; softmax over (e, μ, τ, jet).

Inputs and outputs have CMS's names and layouts; batch and variable lengths are dynamic in ONNX.
"""

from __future__ import annotations

import torch
from torch import nn


def knn(points: torch.Tensor, k: int) -> torch.Tensor:
    """Indices ``[B, N, k]`` of each point's k nearest neighbours (itself excluded)."""
    inner = -2 * torch.matmul(points.transpose(2, 1), points)
    sq = torch.sum(points**2, dim=1, keepdim=True)
    dist = sq + inner + sq.transpose(2, 1)
    return (-dist).topk(k=k + 1, dim=-1)[1][:, :, 1:]


def gather_neighbours(features: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``[B, C, N, k]`` neighbour features, with a flat gather that exports to ONNX with dynamic N."""
    batch, channels, n = features.shape
    k = idx.shape[-1]
    offset = (torch.arange(batch, device=idx.device) * n).view(-1, 1, 1)
    flat = (idx + offset).reshape(-1)
    table = features.transpose(1, 2).reshape(-1, channels)
    return table[flat].view(batch, n, k, channels).permute(0, 3, 1, 2)


class EdgeConv(nn.Module):
    def __init__(self, k: int, c_in: int, channels: tuple[int, ...]):
        super().__init__()
        self.k = k
        layers, last = [], 2 * c_in
        for c in channels:
            layers += [nn.Conv2d(last, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU()]
            last = c
        self.mlp = nn.Sequential(*layers)
        self.shortcut = nn.Sequential(nn.Conv1d(c_in, last, 1, bias=False), nn.BatchNorm1d(last))
        self.act = nn.ReLU()

    def forward(self, points: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        idx = knn(points, self.k)
        neighbours = gather_neighbours(features, idx)
        centre = features.unsqueeze(-1).expand_as(neighbours)
        x = self.mlp(torch.cat([centre, neighbours - centre], dim=1)).mean(dim=-1)
        return self.act(x + self.shortcut(features))


class ParticleNet(nn.Module):
    """ParticleNet with secondary vertices; inputs in CMS's names and layout ``[B, C, N]``.

    Each EdgeConv's kNN needs ``k + 1`` points per jet: CMS pads AK4 inputs to at least 8 particles
    and 1 SV (so k ≤ 8) and AK8 inputs to 16 + 1 (k ≤ 16).
    """

    def __init__(self, pf_features: int, sv_features: int, n_classes: int, k: int,
                 blocks: tuple[tuple[int, ...], ...] = ((32, 32, 32), (64, 64, 64)), embed: int = 32, fc: int = 128):
        super().__init__()
        self.pf_embed = nn.Sequential(nn.BatchNorm1d(pf_features), nn.Conv1d(pf_features, embed, 1, bias=False),
                                      nn.BatchNorm1d(embed), nn.ReLU())
        self.sv_embed = nn.Sequential(nn.BatchNorm1d(sv_features), nn.Conv1d(sv_features, embed, 1, bias=False),
                                      nn.BatchNorm1d(embed), nn.ReLU())
        self.edges = nn.ModuleList()
        last = embed
        for channels in blocks:
            self.edges.append(EdgeConv(k, last, channels))
            last = channels[-1]
        fused = sum(c[-1] for c in blocks)
        self.fusion = nn.Sequential(nn.Conv1d(fused, fc, 1, bias=False), nn.BatchNorm1d(fc), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(fc, fc), nn.ReLU(), nn.Dropout(0.1), nn.Linear(fc, n_classes))

    def logits(self, pf_points, pf_features, pf_mask, sv_points, sv_features, sv_mask) -> torch.Tensor:
        mask = torch.cat([pf_mask, sv_mask], dim=2)
        shift = (1.0 - mask) * 1e9  # CMS's coord_shift: padded points are no one's neighbours, in every EdgeConv
        points = torch.cat([pf_points, sv_points], dim=2) * mask + shift
        x = torch.cat([self.pf_embed(pf_features * pf_mask), self.sv_embed(sv_features * sv_mask)], dim=2) * mask
        outputs = []
        for i, edge in enumerate(self.edges):
            x = edge(points if i == 0 else x + shift, x) * mask
            outputs.append(x)
        x = self.fusion(torch.cat(outputs, dim=1)) * mask
        pooled = x.sum(dim=2) / mask.sum(dim=2).clamp(min=1.0)
        return self.head(pooled)

    def forward(self, pf_points, pf_features, pf_mask, sv_points, sv_features, sv_mask) -> torch.Tensor:
        return torch.softmax(self.logits(pf_points, pf_features, pf_mask, sv_points, sv_features, sv_mask), dim=1)


class DeepMET(nn.Module):
    """Per-candidate weights → MET (px, py) in units of the inputs' scale (50 GeV)."""

    def __init__(self, hidden: int = 32, embed: int = 8):
        super().__init__()
        self.charge = nn.Embedding(3, embed)
        self.pdgid = nn.Embedding(11, embed)
        self.from_pv = nn.Embedding(4, embed)
        self.scale = nn.Parameter(torch.ones(8))
        width = 8 + 3 * embed
        self.local = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.weight = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, cont: torch.Tensor, cat0: torch.Tensor, cat1: torch.Tensor, cat2: torch.Tensor) -> torch.Tensor:
        mask = (cont[:, :, 4:5] > 0).float()  # padded slots have pT = 0
        x = torch.cat([cont * self.scale, self.charge(cat0[:, :, 0].long()), self.pdgid(cat1[:, :, 0].long()),
                       self.from_pv(cat2[:, :, 0].long().clamp(0, 3))], dim=2)
        h = self.local(x) * mask
        context = h.sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1.0)
        w = 2.0 * torch.sigmoid(self.weight(torch.cat([h, context.expand_as(h)], dim=2))) * mask
        return -torch.stack([(w[:, :, 0] * cont[:, :, 6]).sum(dim=1), (w[:, :, 0] * cont[:, :, 7]).sum(dim=1)], dim=1)


class Standardise(nn.Module):
    """(x − mean)/rms clipped to ±5, on the last axis; cells without any object stay 0."""

    def __init__(self, n: int, cells: bool):
        super().__init__()
        self.register_buffer("mean", torch.zeros(n))
        self.register_buffer("rms", torch.ones(n))
        self.cells = cells

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = ((x - self.mean) / self.rms).clamp(-5.0, 5.0)
        if self.cells:
            y = y * (x.abs().sum(dim=-1, keepdim=True) > 0).float()
        return y


class GridTower(nn.Module):
    """One grid (inner or outer): per-block 1×1 convolutions, then 3×3 convolutions and pooling."""

    def __init__(self, blocks: tuple[int, int, int], width: int = 32, convs: int = 2):
        super().__init__()
        self.norms = nn.ModuleList([Standardise(n, cells=True) for n in blocks])
        self.reduce = nn.ModuleList([nn.Sequential(nn.Conv2d(n, 16, 1), nn.ReLU()) for n in blocks])
        layers, last = [nn.Conv2d(16 * len(blocks), width, 1), nn.ReLU()], width
        for _ in range(convs):
            layers += [nn.Conv2d(last, width, 3, padding=1), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.width = width

    def forward(self, grids: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat([red(norm(g).permute(0, 3, 1, 2)) for g, norm, red in zip(grids, self.norms, self.reduce)], dim=1)
        x = self.body(x)
        centre = x[:, :, x.shape[2] // 2, x.shape[3] // 2]
        return torch.cat([x.mean(dim=(2, 3)), x.amax(dim=(2, 3)), centre], dim=1)


class DeepTau(nn.Module):
    """τ vs e/μ/jet classifier on CMS DeepTau v2 inputs (channels-last grids)."""

    def __init__(self, tau_features: int = 43, blocks: tuple[int, int, int] = (86, 64, 38), width: int = 32):
        super().__init__()
        self.tau_norm = Standardise(tau_features, cells=False)
        self.tau = nn.Sequential(nn.Linear(tau_features, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.inner = GridTower(blocks, width, convs=2)
        self.outer = GridTower(blocks, width, convs=2)
        self.head = nn.Sequential(nn.Linear(64 + 6 * width, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 4))

    def logits(self, input_tau, input_inner_egamma, input_inner_muon, input_inner_hadrons, input_outer_egamma,
               input_outer_muon, input_outer_hadrons) -> torch.Tensor:
        tau = self.tau(self.tau_norm(input_tau))
        inner = self.inner([input_inner_egamma, input_inner_muon, input_inner_hadrons])
        outer = self.outer([input_outer_egamma, input_outer_muon, input_outer_hadrons])
        return self.head(torch.cat([tau, inner, outer], dim=1))

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits(*inputs), dim=1)
