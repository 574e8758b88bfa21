"""The three Exa.TrkX networks (torch): embedding MLP, edge-filter MLP, interaction-network GNN.

Needs torch (the ``train`` extra); running the exported ONNX files needs only onnxruntime.

* :class:`EmbeddingNet` maps each hit's features to an 8-d space where hits of one track are close
  (metric learning), so a radius search there builds a small graph with nearly all true edges.
* :class:`FilterNet` scores each candidate edge from its two hits' features: a cheap MLP that
  removes most fake edges before the GNN.
* :class:`InteractionGNN` classifies the surviving edges after a few rounds of message passing
  (Battaglia et al.'s interaction network, as Exa.TrkX uses it): edges are updated from their two
  hits, hits from the sum of their incoming and outgoing edges.

Edge models orient every edge from the hit of smaller r to the hit of larger r inside the network,
so they do not depend on the order the graph builder lists a pair in. Node and edge counts are
dynamic in the exported ONNX graphs (``torch.onnx.export`` with ``dynamic_axes``; scatter-add
aggregation exports as ScatterElements with reduction ``add``).
"""

from __future__ import annotations

import io

import torch
from torch import nn

from ...modules.exatrkx.features import COLUMN, FEATURES

NUM_FEATURES = len(FEATURES)
#: extra per-edge inputs computed from the two hits (:func:`oriented`)
EDGE_EXTRA = 6


def mlp(sizes: list[int], last_activation: bool = True) -> nn.Sequential:
    """Linear layers with LayerNorm + ReLU between them (and after the last if ``last_activation``)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2 or last_activation:
            layers += [nn.LayerNorm(b), nn.ReLU()]
    return nn.Sequential(*layers)


def oriented(features: torch.Tensor, edge_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inner hit, outer hit (by r) and the per-edge input of the edge models.

    The input is both hits' features and the pair's geometry: Δr, Δφ (wrapped), Δz, the slope
    Δz/Δr and the intercept z0 = z - r·Δz/Δr (a prompt track points back to its vertex), and
    Δφ/Δr (proportional to the curvature, so to 1/pT). Features are in the scaled units of
    :mod:`~sonic_hep.modules.exatrkx.features` (lengths in metres, φ in units of π); slopes are
    clipped so that pairs on one layer (Δr ≈ 0) stay finite.
    """
    r = features[:, COLUMN["r"]]
    src, dst = edge_index[0], edge_index[1]
    swap = r[src] > r[dst]
    inner, outer = torch.where(swap, dst, src), torch.where(swap, src, dst)
    fa, fb = features[inner], features[outer]
    dr = fb[:, COLUMN["r"]] - fa[:, COLUMN["r"]]
    dphi = fb[:, COLUMN["phi"]] - fa[:, COLUMN["phi"]]
    dphi = dphi - 2.0 * torch.round(dphi / 2.0)  # φ/π units: wrap into [-1, 1]
    dz = fb[:, COLUMN["z"]] - fa[:, COLUMN["z"]]
    safe_dr = dr.abs() + 1e-3
    slope = torch.clamp(dz / safe_dr, -20.0, 20.0)
    z0 = torch.clamp(fa[:, COLUMN["z"]] - fa[:, COLUMN["r"]] * slope, -2.0, 2.0)
    phi_slope = torch.clamp(5.0 * dphi / safe_dr, -10.0, 10.0)
    extra = torch.stack([dr * 10.0, dphi * 10.0, dz * 10.0, slope * 0.2, z0 * 10.0, phi_slope], dim=1)
    return inner, outer, torch.cat([fa, fb, extra], dim=1)


class EmbeddingNet(nn.Module):
    """Hit features [N, F] → embedding [N, dim]."""

    def __init__(self, hidden: int = 128, layers: int = 3, dim: int = 8):
        super().__init__()
        self.net = mlp([NUM_FEATURES] + [hidden] * layers + [dim], last_activation=False)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)


class FilterNet(nn.Module):
    """(hit features [N, F], edge_index [2, E]) → edge score in [0, 1], [E]."""

    def __init__(self, hidden: int = 64, layers: int = 3):
        super().__init__()
        self.net = mlp([2 * NUM_FEATURES + EDGE_EXTRA] + [hidden] * layers + [1], last_activation=False)

    def logits(self, features: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        _, _, x = oriented(features, edge_index)
        return self.net(x).squeeze(-1)

    def forward(self, features: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.logits(features, edge_index))


class SegmentSum:
    """Sums the rows of ``values`` into segments (message aggregation), reused across message-passing steps.

    The row → segment map is sorted once; each sum is then a float64 cumulative sum of the rows in
    that order, read at the segment boundaries. This exports to Gather/CumSum, which onnxruntime
    runs several times faster than the ScatterElements-with-reduction that ``scatter_add`` becomes;
    float64 keeps the differences of running sums exact to float32 precision. (In torch itself
    ``index_add`` is the faster of the two, so training uses :class:`IndexAdd`; both give the same
    sums to float32 rounding.)

    Args:
        index: the segment of each row (rows beyond ``values``' length wrap around, so one set of
            edge features can feed two segment maps, as incoming and outgoing messages do).
        slots: int64 zeros, one per segment.
        rows: the number of rows of ``values``.
    """

    def __init__(self, index: torch.Tensor, slots: torch.Tensor, rows: int):
        order = torch.argsort(index)
        self.rows = order % rows
        counts = slots.scatter_add(0, index, torch.ones_like(index))
        bounds = torch.cat([torch.zeros_like(counts[:1]), torch.cumsum(counts, 0)])
        self.start, self.end = bounds[:-1], bounds[1:]

    def __call__(self, values: torch.Tensor) -> torch.Tensor:
        running = torch.cumsum(values[self.rows].double(), 0)
        running = torch.cat([torch.zeros_like(running[:1]), running])
        return (running[self.end] - running[self.start]).to(values.dtype)


class IndexAdd:
    """The same sums as :class:`SegmentSum` with ``index_add`` (fast in torch, for training)."""

    def __init__(self, index: torch.Tensor, slots: torch.Tensor, rows: int):
        self.index, self.segments, self.repeats = index, slots.shape[0], index.shape[0] // max(rows, 1)

    def __call__(self, values: torch.Tensor) -> torch.Tensor:
        rows = torch.cat([values] * self.repeats) if self.repeats > 1 else values
        return values.new_zeros(self.segments, values.shape[1]).index_add(0, self.index, rows)


class EdgeBlock(nn.Module):
    """MLP of [x_inner, x_outer, e] with the first layer split, so the node terms are computed per hit
    (N rows) and gathered, instead of per edge on a concatenated [E, 3h] tensor."""

    def __init__(self, hidden: int, out: int, last_activation: bool = True):
        super().__init__()
        self.inner = nn.Linear(hidden, hidden, bias=False)
        self.outer = nn.Linear(hidden, hidden, bias=False)
        self.edge = nn.Linear(hidden, hidden)
        self.rest = nn.Sequential(nn.LayerNorm(hidden), nn.ReLU(), *mlp([hidden, out], last_activation))

    def forward(self, x: torch.Tensor, e: torch.Tensor, inner: torch.Tensor, outer: torch.Tensor) -> torch.Tensor:
        return self.rest(self.inner(x)[inner] + self.outer(x)[outer] + self.edge(e))


class InteractionGNN(nn.Module):
    """(hit features [N, F], edge_index [2, E]) → edge score in [0, 1], [E], after ``steps`` message passings."""

    def __init__(self, hidden: int = 32, steps: int = 4):
        super().__init__()
        self.steps = steps
        self.node_encoder = mlp([NUM_FEATURES, hidden, hidden])
        self.edge_encoder = mlp([2 * NUM_FEATURES + EDGE_EXTRA, hidden, hidden])
        self.edge_network = EdgeBlock(hidden, hidden)
        self.node_network = mlp([3 * hidden, hidden, hidden])
        self.output = EdgeBlock(hidden, 1, last_activation=False)

    def logits(self, features: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        inner, outer, edge_input = oriented(features, edge_index)
        x = self.node_encoder(features)
        e = self.edge_encoder(edge_input)
        n = x.shape[0]
        # incoming messages of each hit land in rows 0..N-1, outgoing ones in rows N..2N-1
        slots = torch.zeros_like(torch.cat([x[:, 0], x[:, 0]]), dtype=torch.int64)  # 2N (dynamic when exported)
        aggregator = SegmentSum if torch.onnx.is_in_onnx_export() else IndexAdd
        aggregate = aggregator(torch.cat([outer, inner + n]), slots, inner.shape[0])
        for _ in range(self.steps):
            e = e + self.edge_network(x, e, inner, outer)
            messages = aggregate(e)
            x = x + self.node_network(torch.cat([x, messages[:n], messages[n:]], dim=1))
        return self.output(x, e, inner, outer).squeeze(-1)

    def forward(self, features: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.logits(features, edge_index))


def export_onnx(model: nn.Module, example: tuple[torch.Tensor, ...], input_names: list[str],
                output_names: list[str], dynamic_axes: dict[str, dict[int, str]]) -> bytes:
    """Serialized ONNX of ``model`` (eval mode) with the given dynamic axes (opset 17)."""
    model.eval()
    buffer = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(model, example, buffer, input_names=input_names, output_names=output_names,
                          dynamic_axes=dynamic_axes, opset_version=17, dynamo=False)
    return buffer.getvalue()
