"""Generator truth from the Pythia record: heavy-flavour hadrons, τ leptons, prompt leptons, partons,
top and W decay products, and the invisible momentum — all vectorised over a batch.

Ancestry questions ("is this pion from a B decay?") are answered by walking ``mother1`` pointers for
all particles at once (:func:`nearest_ancestor`); the walk stops after the hard process, so it takes
as many numpy steps as the longest decay chain, not one per particle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .pythia_events import GenBatch

NEUTRINOS = (12, 14, 16)


def hadron_flavour(pid: np.ndarray) -> np.ndarray:
    """5 for b hadrons, 4 for c hadrons (without b), 0 otherwise (PDG numbering of quark content)."""
    a = np.abs(pid)
    hadron = a > 100
    q = np.stack([(a // 1000) % 10, (a // 100) % 10, (a // 10) % 10])
    has_b = hadron & ((q[0] == 5) | (q[1] == 5) | ((q[0] == 0) & (q[2] == 5) & (q[1] != 5)))
    has_c = hadron & ~has_b & ((q[0] == 4) | (q[1] == 4) | ((q[0] == 0) & (q[2] == 4) & (q[1] != 4)))
    return np.where(has_b, 5, np.where(has_c, 4, 0))


def nearest_ancestor(batch: GenBatch, target: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """For each particle (or those in ``start``), the index of its nearest ancestor with ``target``
    set, following ``mother1``; -1 when there is none.

    Args:
        batch: the event records.
        target (ndarray[bool]): which particles count as ancestors sought.
        start (ndarray[bool] | None): particles to resolve (default: all).
    """
    n = len(batch.pid)
    found = np.full(n, -1, dtype=np.int64)
    active = np.flatnonzero(start) if start is not None else np.arange(n)
    cursor = batch.mother1[active]
    while active.size:
        valid = cursor >= 0
        active, cursor = active[valid], cursor[valid]
        hit = target[cursor]
        found[active[hit]] = cursor[hit]
        active, cursor = active[~hit], batch.mother1[cursor[~hit]]
    return found


def last_copies(batch: GenBatch, selected: np.ndarray) -> np.ndarray:
    """Selected particles none of whose daughters has the same id (the decaying copy)."""
    parent = batch.mother1
    same_child = np.zeros(len(batch.pid), dtype=bool)
    children = np.flatnonzero(selected & (parent >= 0))
    same = batch.pid[parent[children]] == batch.pid[children]
    same_child[parent[children[same]]] = True
    return selected & ~same_child


@dataclass
class HeavyFlavour:
    """Weakly decaying b and c hadrons: the last hadron of its flavour in each decay chain."""

    index: np.ndarray  # global indices
    flavour: np.ndarray  # 5 or 4


def heavy_flavour_hadrons(batch: GenBatch) -> HeavyFlavour:
    flav = hadron_flavour(batch.pid)
    parent = batch.mother1
    has_same_child = np.zeros(len(flav), dtype=bool)
    children = np.flatnonzero((flav > 0) & (parent >= 0))
    same = flav[parent[children]] == flav[children]
    has_same_child[parent[children[same]]] = True
    last = (flav > 0) & ~has_same_child & (batch.status < 0)  # decayed (not stable) hadrons
    idx = np.flatnonzero(last)
    return HeavyFlavour(idx, flav[idx])


@dataclass
class GenTaus:
    """Decayed τ leptons with their visible decay products.

    Attributes:
        index: the τ's global index; ``event``: its event in the batch.
        vis: visible four-momentum (px, py, pz, e) of the final-state non-neutrino descendants.
        hadronic: decayed to hadrons (no e/μ among its direct daughters).
        decay_mode: 5·(prongs − 1) + number of π0 (CMS numbering: 0, 1, 2, 10, 11, ...), -1 leptonic.
        charge: the τ charge.
    """

    index: np.ndarray
    event: np.ndarray
    vis: np.ndarray
    hadronic: np.ndarray
    decay_mode: np.ndarray
    charge: np.ndarray


def gen_taus(batch: GenBatch) -> tuple[GenTaus, np.ndarray]:
    """The decayed τ leptons and, per particle, the index of its τ ancestor (-1: none)."""
    is_tau = np.abs(batch.pid) == 15
    last = last_copies(batch, is_tau)
    tau_of = nearest_ancestor(batch, last)
    idx = np.flatnonzero(last)
    slot = np.full(len(batch.pid), -1, dtype=np.int64)
    slot[idx] = np.arange(idx.size)
    apid = np.abs(batch.pid)
    final = batch.final & (tau_of >= 0)
    visible = final & ~np.isin(apid, NEUTRINOS)
    vis = np.zeros((idx.size, 4))
    owner = slot[tau_of[visible]]
    for k, comp in enumerate((batch.px, batch.py, batch.pz, batch.e)):
        np.add.at(vis[:, k], owner, comp[visible])
    direct_lepton = np.isin(apid, (11, 13)) & (batch.mother1 >= 0)
    direct_lepton &= np.isin(batch.mother1, idx) if idx.size else False
    leptonic = np.zeros(idx.size, dtype=bool)
    leptonic[slot[batch.mother1[direct_lepton]]] = True
    prongs = np.bincount(slot[tau_of[final & (batch.charge != 0) & ~np.isin(apid, NEUTRINOS)]], minlength=idx.size)
    pi0 = np.bincount(slot[tau_of[(apid == 111) & (tau_of >= 0)]], minlength=idx.size)
    mode = np.where(leptonic, -1, 5 * (np.maximum(prongs, 1) - 1) + np.minimum(pi0, 4))
    event = batch.event[idx]
    return GenTaus(idx, event, vis, ~leptonic, mode, batch.charge[idx]), tau_of


def prompt_leptons(batch: GenBatch, tau_of: np.ndarray) -> np.ndarray:
    """Per particle: 1 prompt e, 2 prompt μ, 3 e from τ, 4 μ from τ (CMS ``genPartFlav``), else 0.

    Prompt means no hadron among the ancestors (the lepton comes from a W, Z, γ* or τ).
    """
    apid = np.abs(batch.pid)
    leptons = batch.final & np.isin(apid, (11, 13))
    decayed_hadron = (apid > 100) & (np.abs(batch.status) >= 81)  # not the beam protons
    hadron_anc = nearest_ancestor(batch, decayed_hadron, leptons)
    prompt = leptons & (hadron_anc < 0)
    code = np.where(apid == 11, 1, 2) + np.where(tau_of >= 0, 2, 0)
    return np.where(prompt, code, 0)


def invisible_momentum(batch: GenBatch) -> tuple[np.ndarray, np.ndarray]:
    """Per event (px, py) summed over final-state neutrinos: the generator-level MET vector."""
    nu = batch.final & np.isin(np.abs(batch.pid), NEUTRINOS)
    n = len(batch.counts)
    ev = batch.event[nu]
    return (np.bincount(ev, batch.px[nu], minlength=n), np.bincount(ev, batch.py[nu], minlength=n))


def shower_partons(batch: GenBatch) -> np.ndarray:
    """Quarks and gluons as they enter hadronisation (|status| 71–73): what jet parton flavour uses."""
    apid = np.abs(batch.pid)
    status = np.abs(batch.status)
    return np.flatnonzero(((apid <= 5) | (apid == 21)) & (status >= 71) & (status <= 73))


@dataclass
class HadronicDecays:
    """Hadronically decaying tops and Ws: the event and the (η, φ) of their decay quarks.

    ``tops``: rows (event, b, q1, q2) as global indices; ``ws``: rows (event, q1, q2), including the
    Ws from top decays. Quark directions before the shower are what boosted-jet labels match to.
    """

    tops: np.ndarray
    ws: np.ndarray


def _descend_to_last(batch: GenBatch, idx: np.ndarray) -> np.ndarray:
    """Follows single same-id daughters (recoil copies) down to the decaying copy."""
    idx = idx.copy()
    for _ in range(100):
        d1 = batch.daughter1[idx]
        step = (d1 >= 0) & (batch.pid[np.maximum(d1, 0)] == batch.pid[idx])
        if not step.any():
            break
        idx[step] = d1[step]
    return idx


def _daughters(batch: GenBatch, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return batch.daughter1[idx], np.where(batch.daughter2[idx] >= 0, batch.daughter2[idx], batch.daughter1[idx])


def hadronic_decays(batch: GenBatch) -> HadronicDecays:
    apid = np.abs(batch.pid)
    ws = np.flatnonzero(last_copies(batch, apid == 24))
    d1, d2 = _daughters(batch, ws)
    quark = (d1 >= 0) & (apid[np.maximum(d1, 0)] <= 5) & (apid[np.maximum(d2, 0)] <= 5)
    w_rows = np.stack([batch.event[ws], d1, d2], axis=1)[quark]
    hadronic_ws = ws[quark]  # sorted, like ws
    tops = np.flatnonzero(last_copies(batch, apid == 6))
    t1, t2 = _daughters(batch, tops)
    t1, t2 = np.maximum(t1, 0), np.maximum(t2, 0)
    b = np.where(apid[t1] == 5, t1, np.where(apid[t2] == 5, t2, -1))
    w = np.where(apid[t1] == 24, t1, np.where(apid[t2] == 24, t2, -1))
    ok = (b >= 0) & (w >= 0)
    tops, b, w = tops[ok], b[ok], _descend_to_last(batch, w[ok])
    if hadronic_ws.size == 0:
        top_rows = np.zeros((0, 4), dtype=np.int64)
    else:  # tops whose W is one of the hadronic Ws, with that W's quarks
        row = np.clip(np.searchsorted(hadronic_ws, w), 0, hadronic_ws.size - 1)
        top_rows = np.stack([batch.event[tops], b, w_rows[row, 1], w_rows[row, 2]], axis=1)[hadronic_ws[row] == w]
    return HadronicDecays(top_rows.astype(np.int64).reshape(-1, 4), w_rows.astype(np.int64).reshape(-1, 3))
