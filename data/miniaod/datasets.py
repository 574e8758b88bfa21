"""Training and evaluation samples built with the producers' own preprocessing (so a model sees in
training exactly what it sees in a job): ParticleNet jets, DeepMET events, DeepTau τs, with labels.

Files are read with the framework's ROOT source; events are visited one by one, like the producers.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ...framework.config import SourceConfig
from ...framework.source import Request, RootSource
from ...modules.miniaod import boosted_jet_tags, deepmet, deeptau_inputs
from ...modules.miniaod.columns import columns
from ...modules.miniaod.particlenet_inputs import INPUTS, ParticleNetInputs, particlenet_inputs
from .samples import TAU_GRID_NAMES, JetSample, MetSample, TauSample

#: ParticleNet's neighbour count: the model needs k + 1 points per jet (CMS pads AK4 to 8, AK8 to 16)
PARTICLENET_K = {"ak4": 8, "ak8": 16}


def ak4_label(hadron: np.ndarray, parton: np.ndarray, pu_fraction: np.ndarray) -> np.ndarray:
    """Index in :data:`AK4_LABELS`, or -1 for jets of no class (leptons, τs, unmatched)."""
    apid = np.abs(parton)
    return np.select([pu_fraction > 0.5, hadron == 5, hadron == 4, apid == 21, (apid >= 1) & (apid <= 3)],
                     [4, 0, 1, 3, 2], -1)


def ak8_label(label: np.ndarray) -> np.ndarray:
    """``FatJet_label`` (0 QCD, 1 top, 2 W) → index in :data:`AK8_LABELS`."""
    return np.select([label == 1, label == 2], [0, 1], 2)


def tau_label(flav: np.ndarray) -> np.ndarray:
    """``Tau_genPartFlav`` → index in :data:`TAU_LABELS` (e, μ, τ, jet)."""
    return np.select([(flav == 1) | (flav == 3), (flav == 2) | (flav == 4), flav == 5], [0, 1, 2], 3)


def events(files: list[str], requests: dict[str, tuple[str, ...] | None], max_events: int = -1) -> Iterator[dict]:
    """Per event: ``{key: numpy columns}`` for collections (fields given) or a scalar for branches."""
    source = RootSource(SourceConfig(files=list(files), max_events=max_events, chunk_size=200),
                        [Request(key, fields) for key, fields in requests.items()])
    for chunk in source.chunks():
        for i in range(chunk.length):
            yield {key: (columns(chunk.columns[key][i], fields) if fields else chunk.columns[key][i])
                   for key, fields in requests.items()}


def _ragged(x: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``[real entries, features]`` of ``[jets, features, length]`` and the entries per jet."""
    real = mask[:, 0, :] > 0
    return x.transpose(0, 2, 1)[real], real.sum(axis=1)


def jet_sample(files: list[str], which: str, max_events: int = -1, max_pu_fraction: float = 0.25) -> JetSample:
    """AK4 (``which="ak4"``: Jet) or AK8 (``"ak8"``: FatJet) jets of ``files`` with a class label.

    Pile-up jets (half of all AK4 jets at ⟨μ⟩ = 30) are kept only up to ``max_pu_fraction`` of the sample.
    """
    spec: ParticleNetInputs = INPUTS[which]
    jets, members = ("Jet", "JetPFCands") if which == "ak4" else ("FatJet", "FatJetPFCands")
    truth = ("hadronFlavour", "partonFlavour", "puFraction") if which == "ak4" else ("label",)
    requests = {jets: (*boosted_jet_tags.JET_FIELDS, *truth), members: boosted_jet_tags.MEMBER_FIELDS,
                "PFCands": boosted_jet_tags.PF_FIELDS, "SV": boosted_jet_tags.SV_FIELDS}
    pf, pf_n, sv, sv_n, labels, pts = [], [], [], [], [], []
    for event in events(files, requests, max_events):
        jet = event[jets]
        if len(jet["pt"]) == 0:
            continue
        label = (ak4_label(jet["hadronFlavour"], jet["partonFlavour"], jet["puFraction"]) if which == "ak4"
                 else ak8_label(jet["label"]))
        keep = label >= 0
        if not keep.any():
            continue
        x = particlenet_inputs(spec, jet, event["PFCands"], event[members], event["SV"])
        rows, counts = _ragged(x["pf_features"][keep], x["pf_mask"][keep])
        pf.append(rows)
        pf_n.append(counts)
        rows, counts = _ragged(x["sv_features"][keep], x["sv_mask"][keep])
        sv.append(rows)
        sv_n.append(counts)
        labels.append(label[keep])
        pts.append(jet["pt"][keep])
    pf_n, sv_n, labels = np.concatenate(pf_n), np.concatenate(sv_n), np.concatenate(labels).astype(np.int64)
    sample = JetSample(np.concatenate(pf), np.concatenate([[0], np.cumsum(pf_n)]), np.concatenate(sv),
                       np.concatenate([[0], np.cumsum(sv_n)]), labels, np.concatenate(pts).astype(np.float32),
                       PARTICLENET_K[which] + 1)
    if which == "ak4":
        pu = np.flatnonzero(labels == 4)
        allowed = int(max_pu_fraction * (labels != 4).sum() / (1 - max_pu_fraction))
        if pu.size > allowed:
            drop = np.random.default_rng(0).choice(pu, pu.size - allowed, replace=False)
            sample = subset(sample, np.setdiff1d(np.arange(labels.size), drop))
    return sample


def subset(sample: JetSample, index: np.ndarray) -> JetSample:
    """The jets ``index`` of a sample."""
    def take(rows: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        counts = offsets[index + 1] - offsets[index]
        src = np.repeat(offsets[index], counts) + np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        return rows[src], np.concatenate([[0], np.cumsum(counts)])

    pf, pf_offsets = take(sample.pf, sample.pf_offsets)
    sv, sv_offsets = take(sample.sv, sample.sv_offsets)
    return JetSample(pf, pf_offsets, sv, sv_offsets, sample.labels[index], sample.pt[index], sample.min_pf)


def met_sample(files: list[str], max_events: int = -1, max_candidates: int = 4500) -> MetSample:
    """DeepMET inputs of every event, with generator, PF and PUPPI MET."""
    requests = {"PFCands": deepmet.FIELDS, "GenMET_pt": None, "GenMET_phi": None, "MET_pt": None, "MET_phi": None,
                "PuppiMET_pt": None, "PuppiMET_phi": None}
    conts, cats, counts, target, pf_met, puppi = [], [], [0], [], [], []
    for event in events(files, requests, max_events):
        x = deepmet.deepmet_inputs(event["PFCands"], max_candidates)
        n = min(len(event["PFCands"]["pt"]), max_candidates)
        conts.append(x["input"][0, :n])
        cats.append(np.concatenate([x["input_cat0"][0, :n], x["input_cat1"][0, :n], x["input_cat2"][0, :n]], axis=1))
        counts.append(n)
        for out, pt, phi in ((target, "GenMET_pt", "GenMET_phi"), (pf_met, "MET_pt", "MET_phi"),
                             (puppi, "PuppiMET_pt", "PuppiMET_phi")):
            out.append((event[pt] * np.cos(event[phi]) / 50.0, event[pt] * np.sin(event[phi]) / 50.0))
    return MetSample(np.concatenate(conts), np.concatenate(cats), np.cumsum(counts), np.array(target, np.float32),
                     np.array(pf_met, np.float32), np.array(puppi, np.float32))


def tau_sample(files: list[str], max_events: int = -1, jet_keep: float = 0.35) -> TauSample:
    """DeepTau inputs of every τ candidate with its class; jet fakes (most candidates) are kept with
    probability ``jet_keep``."""
    requests = {"Tau": (*deeptau_inputs.TAU_FIELDS, "genPartFlav"), "PFCands": deeptau_inputs.PF_FIELDS,
                "Electron": deeptau_inputs.ELECTRON_FIELDS, "Muon": deeptau_inputs.MUON_FIELDS,
                "fixedGridRhoFastjetAll": None}
    taus, labels, pts = [], [], []
    cells: dict[str, list[list[np.ndarray]]] = {name: [[], [], [], []] for name in TAU_GRID_NAMES}
    count = 0
    rng = np.random.default_rng(0)
    for event in events(files, requests, max_events):
        tau = event["Tau"]
        label = tau_label(tau["genPartFlav"])
        keep = np.flatnonzero((label != 3) | (rng.random(label.size) < jet_keep))
        if keep.size == 0:
            continue
        tau = {k: v[keep] for k, v in tau.items()}
        x = deeptau_inputs.deeptau_inputs(event["PFCands"], tau, float(event["fixedGridRhoFastjetAll"]),
                                          {"Electron": event["Electron"], "Muon": event["Muon"]})
        taus.append(x["input_tau"])
        labels.append(label[keep])
        pts.append(tau["pt"])
        for name in TAU_GRID_NAMES:
            grid = x[name]
            t, ie, ip = np.nonzero(np.any(grid != 0, axis=-1))
            store = cells[name]
            store[0].append(t + count)
            store[1].append(ie)
            store[2].append(ip)
            store[3].append(grid[t, ie, ip])
        count += keep.size
    return TauSample(np.concatenate(taus), np.concatenate(labels).astype(np.int64), np.concatenate(pts),
                     {name: tuple(np.concatenate(part) for part in store) for name, store in cells.items()})
