"""Anti-kT jets with FastJet (PyPI ``fastjet``), clustered for a whole batch in one call.

AK4 jets are CHS jets (charged candidates from pile-up vertices removed, ``fromPV == 0``), AK8 jets
are PUPPI jets (candidate four-momenta scaled by their PUPPI weight), as in CMS MiniAOD. Candidates
with a non-finite or non-positive pT are never given to FastJet (it crashes on NaN).
Constituents are kept as indices into the event's PF candidates, NanoAOD-style.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import awkward as ak
import numpy as np

from ...framework.extras import require
from .detector import PFCandidates


@dataclass
class Jets:
    """Jets of a batch, flat, sorted by event then decreasing pT.

    ``constituents_jet``/``constituents_cand``: one row per constituent, the jet's global index and
    the candidate's global index (into the batch's flat PF candidates); sorted by jet.
    """

    event: np.ndarray
    pt: np.ndarray
    eta: np.ndarray
    phi: np.ndarray
    mass: np.ndarray
    n_constituents: np.ndarray
    constituents_jet: np.ndarray
    constituents_cand: np.ndarray


@functools.cache
def _silence_banner() -> None:
    """FastJet prints a banner on its first clustering; print it once into /dev/null."""
    swig = require("fastjet._swig", "the MiniAOD generator's jet clustering")

    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            swig.ClusterSequence.print_banner()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def cluster(cands: PFCandidates, n_events: int, selected: np.ndarray, weights: np.ndarray | None, radius: float,
            min_pt: float) -> Jets:
    """Anti-kT jets of the ``selected`` candidates (four-momenta times ``weights`` if given)."""
    fastjet = require("fastjet", "the MiniAOD generator's jet clustering")
    _silence_banner()
    scale = np.ones(cands.pt.size) if weights is None else weights
    ok = selected & np.isfinite(cands.pt) & (cands.pt * scale > 0) & np.isfinite(cands.eta) & np.isfinite(cands.phi)
    index = np.flatnonzero(ok)
    counts = np.bincount(cands.event[index], minlength=n_events)
    s = scale[index]
    px, py, pz, e = (cands.px[index] * s, cands.py[index] * s, cands.pz[index] * s, cands.energy[index] * s)
    particles = ak.zip({name: ak.unflatten(v, counts) for name, v in (("px", px), ("py", py), ("pz", pz), ("E", e))})
    sequence = fastjet.ClusterSequence(particles, fastjet.JetDefinition(fastjet.antikt_algorithm, radius))
    jets = sequence.inclusive_jets(min_pt)
    members = sequence.constituent_index(min_pt)
    jpx, jpy, jpz, je = (ak.to_numpy(ak.flatten(jets[f])) for f in ("px", "py", "pz", "E"))
    jet_counts = ak.to_numpy(ak.num(jets))
    jpt = np.hypot(jpx, jpy)
    jevent = np.repeat(np.arange(n_events), jet_counts)
    order = np.lexsort((-jpt, jevent))
    per_jet = ak.to_numpy(ak.flatten(ak.num(members, axis=2)))
    local = ak.to_numpy(ak.flatten(members, axis=None)).astype(np.int64)
    # members index the event's selected candidates: map to global candidate indices
    first_selected = np.cumsum(counts) - counts
    member_event = np.repeat(jevent, per_jet)
    cand = index[first_selected[member_event] + local]
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    member_jet = np.repeat(rank, per_jet)
    by_jet = np.argsort(member_jet, kind="stable")
    jpx, jpy, jpz, je, jpt, jevent = (a[order] for a in (jpx, jpy, jpz, je, jpt, jevent))
    p = np.sqrt(jpx**2 + jpy**2 + jpz**2)
    with np.errstate(invalid="ignore", divide="ignore"):
        eta = np.arcsinh(jpz / jpt)
    mass = np.sqrt(np.maximum(je**2 - p**2, 0.0))
    return Jets(event=jevent, pt=jpt, eta=eta, phi=np.arctan2(jpy, jpx), mass=mass, n_constituents=per_jet[order],
                constituents_jet=member_jet[by_jet], constituents_cand=cand[by_jet])
