"""The named features of CMS's ParticleNet family for every jet of a batch of events: CMS's tag-info producers.

A ``preprocess.json`` names the features a model reads; this module computes any of them, by name, for all
jets of all events of a batch at once (vectorised over (jet, entry) rows; no loop over events, jets or
particles), with CMS's definitions:

* ``pfcand_*`` and ``sv_*`` — ``DeepBoostedJetTagInfoProducer`` (ParticleNet AK4 CHS V00, AK8 General V01,
  MD-2prong, MassRegression): constituents with a PUPPI weight ≥ ``min_puppi_weight``, ordered by pT
  (PUPPI-weighted when ``use_puppi_p4``: then ``pfcand_pt_log``, ``*rel*`` use the weighted momentum; the
  ``*_nopuppi`` ones never do); SVs within ``jet_radius`` of the jet axis, ordered by dxy significance.
* ``jet_pfcand_*``, ``jet_sv_*``, ``jet_losttrack_*`` and ``lt_mask`` — ``ParticleNetFeatureEvaluator`` (the
  from-MiniAOD models): constituents above ``min_pt_for_pfcandidates`` by raw pT; lost tracks within
  ``lost_track_max_dr`` of the jet above ``lost_track_min_pt``, by pT.

The jet selection is CMS's: a jet below ``min_jet_pt``, outside ``min_jet_eta`` ≤ |η| ≤ ``max_jet_eta`` or
without constituents gets no entries at all (``ParticleNetFeatureEvaluator``, the from-MiniAOD versions, keeps
a jet whose corrected *or* raw pT reaches ``min_jet_pt``). A jet with no entries — outside the selection, or
inside with every constituent dropped and no SV (nor, for the from-MiniAOD versions, lost track) — is one
CMS's tag-info producers leave empty (:attr:`TagInfo.filled` is False): CMS's jet-tag producers do not run the
model for it and write 0 for every output.

What a generated MiniAOD-like sample cannot give is documented and constant, as CMS fills it when the
object is absent: tracks are straight lines from their reference point (``vx, vy, vz`` relative to the PV),
so impact parameters, the jet distance and the decay length are those of lines; the track covariance is
only its dxy/dz errors (other elements 0); there are no subjets (``pfcand_drsubjet*`` = -1), no reco
muons/electrons/photons matched to candidates (``jet_pfcand_muon_*``, ``electron_*``, ``photon_*`` = 0), no
τ signal-candidate links (``jet_pfcand_tau_signal`` = 0) and no strip hits on PF candidates
(``jet_pfcand_nstriphits`` = 0; lost tracks carry theirs).

A batch is the events' collections flattened one event after another (:class:`~.columns.Flat`): a jet is
paired only with the constituents, SVs and lost tracks of its own event, and every feature is a function of
its row alone (or, ``pfcand_drminsv``, an exact minimum over the event's SVs), so a jet's values are the same
bit for bit whatever else is in the batch. One event is a batch of one.

Example::

    info = TagInfo(TagInfoSettings(jet_radius=0.4), jets, pf, members, svs)             # one event
    info = TagInfo.of_batch(TagInfoSettings(jet_radius=0.4), jets, pf, members, svs)    # Flat collections
    info.feature("pfcand_btagSip3dSig")     # one value per (jet, constituent) row
    info.entries("pfcand_btagSip3dSig")     # which jet (of the batch) and rank each row is
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..common.kinematics import delta_phi, rank_within
from .columns import Flat, event_pairs
from .preprocess import Entries

#: charged-pion mass (GeV): CMS's ``btau::etaRel`` gives every track this mass
PION_MASS = 0.13957018


@dataclass(frozen=True)
class TagInfoSettings:
    """The tag-info producer's selection (CMS's parameter names in brackets).

    Args:
        jet_radius: SVs within ΔR < radius of the jet axis belong to it [jet_radius].
        min_jet_pt, min_jet_eta, max_jet_eta: jets outside get no entries [min_jet_pt, min_jet_eta, max_jet_eta]
            (the from-MiniAOD Forward versions tag |η| ≥ 2.5 only).
        feature_evaluator: the selection of ``ParticleNetFeatureEvaluator`` (the from-MiniAOD versions) rather
            than ``DeepBoostedJetTagInfoProducer``'s: a jet passes ``min_jet_pt`` by its corrected or its raw
            pT (the jets' ``raw_pt`` column, when there is one), and its lost tracks count as entries.
        min_puppi_weight: constituents with a lower PUPPI weight are dropped [min_puppi_wgt].
        use_puppi_p4: PUPPI-weighted momenta for the ordering and the weighted features [use_puppiP4].
        min_pt_for_pfcandidates: constituents below are dropped [min_pt_for_pfcandidates].
        lost_track_max_dr, lost_track_min_pt: lost tracks of a jet [max_dr_for_losttrack, min_pt_for_losttrack].
    """

    jet_radius: float = 0.8
    min_jet_pt: float = 0.0
    min_jet_eta: float = 0.0
    max_jet_eta: float = float("inf")
    min_puppi_weight: float = -1.0
    use_puppi_p4: bool = False
    min_pt_for_pfcandidates: float = -1.0
    lost_track_max_dr: float = 0.4
    lost_track_min_pt: float = 1.0
    feature_evaluator: bool = False


#: which collection a feature name describes, by prefix (longest first)
PREFIXES = (("jet_losttrack_", "lt"), ("jet_pfcand_", "pf"), ("jet_sv_", "sv"), ("pfcand_", "pf"), ("sv_", "sv"),
            ("lt_", "lt"))


@functools.cache
def collection_of(name: str) -> str | None:
    """``"pf"``, ``"sv"`` or ``"lt"`` for a feature name, None for a name of no known family."""
    return next((kind for prefix, kind in PREFIXES if name.startswith(prefix)), None)


@dataclass(frozen=True)
class _Rows:
    """A collection's (jet, entry) rows, sorted by jet then rank."""

    jet: np.ndarray
    index: np.ndarray  # row of the collection (candidate, SV, lost track)
    rank: np.ndarray
    counts: np.ndarray


def _rows(jet: np.ndarray, index: np.ndarray, key: np.ndarray, n_jets: int) -> _Rows:
    order, rank = rank_within(jet, key)
    jet, index = jet[order], index[order]
    return _Rows(jet, index, rank, np.bincount(jet, minlength=n_jets))


@dataclass(frozen=True)
class EventLayout:
    """Where a batch's events are in its flattened collections: the event of each jet, and the first row of
    each event's SVs and lost tracks (``None``: one event, every row). This is what keeps a jet from being
    paired with another event's SVs or lost tracks once the collections of many events are one array."""

    jet_event: np.ndarray
    sv_offsets: np.ndarray | None = None
    lt_offsets: np.ndarray | None = None

    @staticmethod
    def single(n_jets: int) -> EventLayout:
        """One event."""
        return EventLayout(np.zeros(n_jets, np.int64))


def _global_members(jets: Flat, pf: Flat, members: Flat) -> dict[str, np.ndarray]:
    """The constituent pairs with indices into the flattened jets and candidates (the file's are within the
    event); a pair pointing outside its event's jets or candidates is dropped rather than read another
    event's object."""
    event = members.event
    jet = np.asarray(members.columns["jetIdx"], np.int64)
    cand = np.asarray(members.columns["pFCandsIdx"], np.int64)
    valid = (jet >= 0) & (jet < jets.counts[event]) & (cand >= 0) & (cand < pf.counts[event])
    if not valid.all():
        event, jet, cand = event[valid], jet[valid], cand[valid]
    return {"jetIdx": jet + jets.offsets[event], "pFCandsIdx": cand + pf.offsets[event]}


def _take(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``values[index]`` as float64: gathered before the conversion, since a batch's candidate columns hold
    every candidate of every event and only the jets' constituents are needed (the values are the same: the
    conversion is exact)."""
    return np.asarray(values)[index].astype(np.float64)


def _log(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(x)


def _nan_to_zero(x: np.ndarray) -> np.ndarray:
    """ParticleNetFeatureEvaluator's ``isnan(x) ? 0 : x`` (infinities stay, for preprocess to replace)."""
    return np.where(np.isnan(x), 0.0, x)


def eta_rel(direction: np.ndarray, momentum: np.ndarray) -> np.ndarray:
    """CMS's ``btau::etaRel``: rapidity along ``direction`` (unit vectors, rows) of a pion of ``momentum``."""
    along = (direction * momentum).sum(axis=1)
    energy = np.sqrt((momentum**2).sum(axis=1) + PION_MASS**2)
    with np.errstate(divide="ignore", invalid="ignore"):
        return 0.5 * np.log((energy + along) / (energy - along))


def track_geometry(ref: np.ndarray, momentum: np.ndarray, axis: np.ndarray, dxy: np.ndarray, dxy_error: np.ndarray,
                   dz_error: np.ndarray) -> dict[str, np.ndarray]:
    """Impact parameters, jet distance and decay length of straight tracks relative to the jet axis (a line
    through the PV, at the origin), as CMS's ``IPTools`` signs them: positive when the impact point lies
    in the jet's hemisphere.

    Args:
        ref: ``[rows, 3]`` track reference points (cm), the point of closest approach in xy.
        momentum: ``[rows, 3]`` track momenta.
        axis: ``[rows, 3]`` unit jet directions.
        dxy, dxy_error, dz_error: the track's transverse impact parameter and the errors (cm).
    """
    p = np.linalg.norm(momentum, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        direction = momentum / p[:, None]
        ip = ref - (ref * direction).sum(axis=1)[:, None] * direction
        ip3d = np.where((ip * axis).sum(axis=1) >= 0, 1.0, -1.0) * np.linalg.norm(ip, axis=1)
        sin_theta = np.hypot(direction[:, 0], direction[:, 1])
        ip3d_error = np.hypot(dxy_error, dz_error * sin_theta)
        ip2d = np.where((ref[:, :2] * axis[:, :2]).sum(axis=1) >= 0, 1.0, -1.0) * np.abs(dxy)
        normal = _cross(direction, axis)
        jet_distance = -np.abs((ref * normal).sum(axis=1)) / np.linalg.norm(normal, axis=1)
        # closest approach of the track line ref + t·direction to the jet line u·axis
        cos = (direction * axis).sum(axis=1)
        ref_axis, ref_dir = (ref * axis).sum(axis=1), (ref * direction).sum(axis=1)
        t = (cos * ref_axis - ref_dir) / (1.0 - cos**2)
        decay_length = ((ref + t[:, None] * direction) * axis).sum(axis=1)
        return {"ip3d": ip3d, "ip3d_sig": ip3d / ip3d_error, "ip2d": ip2d, "ip2d_sig": ip2d / dxy_error,
                "jet_distance": jet_distance, "decay_length": decay_length,
                "eta_rel": eta_rel(axis, momentum), "pt_ratio": np.linalg.norm(_cross(momentum, axis), axis=1) / p,
                "ppar_ratio": (momentum * axis).sum(axis=1) / p}


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cross product of ``[rows, 3]`` arrays (np.cross's axis handling costs more than the product)."""
    out = np.empty_like(a)
    out[:, 0] = a[:, 1] * b[:, 2] - a[:, 2] * b[:, 1]
    out[:, 1] = a[:, 2] * b[:, 0] - a[:, 0] * b[:, 2]
    out[:, 2] = a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]
    return out


def _p3(pt: np.ndarray, eta: np.ndarray, phi: np.ndarray) -> np.ndarray:
    out = np.empty((np.size(pt), 3))
    out[:, 0], out[:, 1], out[:, 2] = pt * np.cos(phi), pt * np.sin(phi), pt * np.sinh(eta)
    return out


def _energy(pt: np.ndarray, eta: np.ndarray, mass: np.ndarray) -> np.ndarray:
    p = pt * np.cosh(eta)
    return np.sqrt(p * p + mass * mass)


class MissingInput(KeyError):
    """A feature needs a collection or field the event does not have (the caller names its module)."""


class TagInfo:
    """CMS's tag info for all jets of one event, or of a batch of events (:meth:`of_batch`): any named
    feature, computed on first use.

    Args:
        settings: the selection.
        jets: jet columns ``pt, eta, phi`` (and ``mass`` for ``*erel*``), one entry per jet.
        pf: PF-candidate columns (NanoAOD ``PFCands_*`` names).
        members: constituent pairs ``jetIdx, pFCandsIdx`` (NanoAOD-style) indexing ``jets`` and ``pf``.
        svs: secondary-vertex columns (``SV_*`` names).
        lost_tracks: lost-track columns (``LostTracks_*``), or None when the event has none.
        layout: where each event's rows are when the columns are a batch's (default: one event).
    """

    def __init__(self, settings: TagInfoSettings, jets: Mapping[str, np.ndarray], pf: Mapping[str, np.ndarray],
                 members: Mapping[str, np.ndarray], svs: Mapping[str, np.ndarray],
                 lost_tracks: Mapping[str, np.ndarray] | None = None, layout: EventLayout | None = None):
        self.settings, self.jets, self.pf, self.members = settings, jets, pf, members
        self.svs, self.lt = svs, lost_tracks
        self.n_jets = len(jets["pt"])
        self.layout = layout or EventLayout.single(self.n_jets)
        self._cache: dict[str, np.ndarray] = {}
        self._blocks: dict[Callable, dict] = {}
        self._jet_cache: dict[int, dict[str, np.ndarray]] = {}

    @classmethod
    def of_batch(cls, settings: TagInfoSettings, jets: Flat, pf: Flat, members: Flat, svs: Flat,
                 lost_tracks: Flat | None = None) -> TagInfo:
        """The tag info of every jet of a batch of events, from its flattened collections (the constituent
        indices, per event in the file, are made batch-wide)."""
        layout = EventLayout(jets.event, svs.offsets, None if lost_tracks is None else lost_tracks.offsets)
        return cls(settings, jets.columns, pf.columns, _global_members(jets, pf, members), svs.columns,
                   None if lost_tracks is None else lost_tracks.columns, layout)

    # -- rows -------------------------------------------------------------------------------------------
    @cached_property
    def _jet_ok(self) -> np.ndarray:
        """The jets inside CMS's selection: pT, |η| and at least one constituent (before any is dropped)."""
        s = self.settings
        pt_ok = np.asarray(self.jets["pt"]) >= s.min_jet_pt
        if s.feature_evaluator and "raw_pt" in self.jets:
            pt_ok |= np.asarray(self.jets["raw_pt"]) >= s.min_jet_pt
        abs_eta = np.abs(self.jets["eta"])
        jet = np.asarray(self.members["jetIdx"], np.int64)
        members = np.bincount(jet[(jet >= 0) & (jet < self.n_jets)], minlength=self.n_jets)
        return pt_ok & (abs_eta >= s.min_jet_eta) & (abs_eta <= s.max_jet_eta) & (members > 0)

    @cached_property
    def filled(self) -> np.ndarray:
        """Per jet: whether CMS's tag-info producer fills its features — inside the selection with at least one
        constituent or SV (or, for the from-MiniAOD versions, lost track) left. CMS's jet-tag producers
        (``BoostedJetONNXJetTagsProducer``, ``ParticleNetSonicJetTagsProducer``) write 0 for every output of
        the other jets, whose inputs would be padding only, and the ONNX one does not run the model for them."""
        entries = self.pf_rows.counts + self.sv_rows.counts
        if self.settings.feature_evaluator and self.lt is not None:
            entries = entries + self.lt_rows.counts
        return self._jet_ok & (entries > 0)

    @cached_property
    def _puppi(self) -> np.ndarray | None:
        """PUPPI weights of the candidates, when the settings use them."""
        s = self.settings
        return self._field(self.pf, "PF candidates", "puppiWeight") if s.use_puppi_p4 or s.min_puppi_weight > 0 \
            else None

    @cached_property
    def pf_rows(self) -> _Rows:
        s = self.settings
        jet = np.asarray(self.members["jetIdx"], np.int64)
        cand = np.asarray(self.members["pFCandsIdx"], np.int64)
        pt = np.asarray(self.pf["pt"])[cand]
        keep = self._jet_ok[jet] & (pt >= s.min_pt_for_pfcandidates)
        key = pt
        if self._puppi is not None:
            weight = self._puppi[cand]
            keep &= weight >= s.min_puppi_weight
            if s.use_puppi_p4:
                key = pt * weight
        return _rows(jet[keep], cand[keep], key[keep], self.n_jets)

    @staticmethod
    def _offsets(other: Mapping[str, np.ndarray], offsets: np.ndarray | None) -> np.ndarray:
        """A collection's event offsets (one event holding every row when ``offsets`` is None)."""
        return np.array([0, len(other["pt"])], np.int64) if offsets is None else offsets

    def _near(self, other: Mapping[str, np.ndarray], offsets: np.ndarray | None, radius: float,
              extra: np.ndarray | None = None) -> tuple:
        """(jet, row) pairs of every jet with every row of ``other`` of its event within ΔR < ``radius`` (and
        ``extra``)."""
        jet, row = event_pairs(self.layout.jet_event, self._offsets(other, offsets))
        dr2 = (np.asarray(other["eta"])[row] - self.jets["eta"][jet]) ** 2 + \
            delta_phi(np.asarray(other["phi"])[row], self.jets["phi"][jet]) ** 2
        keep = (dr2 < radius**2) & self._jet_ok[jet]
        if extra is not None:
            keep &= extra[row]
        return jet[keep], row[keep]

    @cached_property
    def sv_rows(self) -> _Rows:
        jet, sv = self._near(self.svs, self.layout.sv_offsets, self.settings.jet_radius)
        return _rows(jet, sv, np.nan_to_num(_take(self.svs["dxySig"], sv)), self.n_jets)

    @cached_property
    def lt_rows(self) -> _Rows:
        if self.lt is None:
            raise MissingInput("lost tracks")
        s = self.settings
        jet, lt = self._near(self.lt, self.layout.lt_offsets, s.lost_track_max_dr,
                             np.asarray(self.lt["pt"]) > s.lost_track_min_pt)
        return _rows(jet, lt, _take(self.lt["pt"], lt), self.n_jets)

    def _collection_rows(self, name: str) -> _Rows:
        kind = collection_of(name)
        if kind is None:
            raise MissingInput(f"feature {name!r}")
        return {"pf": lambda: self.pf_rows, "sv": lambda: self.sv_rows, "lt": lambda: self.lt_rows}[kind]()

    def entries(self, name: str) -> Entries:
        """Which jet and rank each value of ``feature(name)`` belongs to."""
        rows = self._collection_rows(name)
        return Entries(rows.jet, rows.rank, rows.counts)

    # -- features -------------------------------------------------------------------------------------
    def feature(self, name: str) -> np.ndarray:
        """The values of one named feature, one per row of its collection (float64)."""
        if name not in self._cache:
            method = FEATURE_BLOCKS.get(name)
            if method is None:
                raise MissingInput(f"feature {name!r}")
            if method not in self._blocks:
                self._blocks[method] = method(self)
            block = self._blocks[method]
            value = block[name] if name in block else block.lazy[name]()
            self._cache[name] = np.asarray(value, dtype=np.float64)
        return self._cache[name]

    @staticmethod
    def _field(columns: Mapping[str, np.ndarray], what: str, name: str) -> np.ndarray:
        try:
            return np.asarray(columns[name])
        except KeyError:
            raise MissingInput(f"field {name!r} of the {what}") from None

    def _jet_columns(self, jet: np.ndarray) -> dict[str, np.ndarray]:
        """The jet's ``pt, eta, phi`` and unit direction ``axis`` on each row (cached per row set)."""
        key = id(jet)
        if key not in self._jet_cache:
            pt, eta, phi = (_take(self.jets[k], jet) for k in ("pt", "eta", "phi"))
            axis = _p3(np.ones_like(pt), eta, phi) / np.cosh(eta)[:, None]
            self._jet_cache[key] = {"pt": pt, "eta": eta, "phi": phi, "axis": axis, "rows": jet}
        return self._jet_cache[key]

    def _jet_energy(self, jet: np.ndarray) -> np.ndarray:
        j = self._jet_columns(jet)
        return _energy(j["pt"], j["eta"], self._field(self.jets, "jets", "mass")[jet].astype(np.float64))

    @cached_property
    def _candidate_columns(self) -> dict[str, np.ndarray]:
        rows = self.pf_rows
        c = rows.index
        out = {k: _take(self.pf[k], c) for k in ("pt", "eta", "phi", "charge")}
        out["mass"] = _take(self._field(self.pf, "PF candidates", "mass"), c)
        out["apid"] = np.abs(self._field(self.pf, "PF candidates", "pdgId")[c])
        out["track"] = out["charge"] != 0
        out["energy"] = _energy(out["pt"], out["eta"], out["mass"])
        return out

    def _candidates(self) -> dict[str, np.ndarray]:
        return self._candidate_columns

    def _track_geometry(self, columns: Mapping[str, np.ndarray], what: str, index: np.ndarray,
                        jet: np.ndarray) -> dict[str, np.ndarray]:
        f = lambda name: _take(self._field(columns, what, name), index)  # noqa: E731
        pt, eta, phi = f("pt"), f("eta"), f("phi")
        ref = np.stack([f("vx"), f("vy"), f("vz")], axis=1)
        return track_geometry(ref, _p3(pt, eta, phi), self._jet_columns(jet)["axis"], f("dxy"), f("dxyError"),
                              f("dzError"))

    # DeepBoostedJetTagInfoProducer --------------------------------------------------------------------
    def _pfcand_basic(self) -> dict[str, np.ndarray]:
        rows, c = self.pf_rows, self._candidates()
        j = self._jet_columns(rows.jet)
        weight = self._puppi[rows.index] if self._puppi is not None and self.settings.use_puppi_p4 \
            else np.ones(rows.index.size)
        etasign = np.where(j["eta"] > 0, 1.0, -1.0)
        track = c["track"]
        field = lambda name: _take(self._field(self.pf, "PF candidates", name), rows.index)  # noqa: E731
        dphi = delta_phi(c["phi"], j["phi"])
        apid = c["apid"]
        with np.errstate(divide="ignore", invalid="ignore"):
            out = {
                "pfcand_mask": np.ones(rows.index.size), "pfcand_charge": c["charge"],
                "pfcand_isEl": apid == 11, "pfcand_isMu": apid == 13, "pfcand_isChargedHad": apid == 211,
                "pfcand_isGamma": apid == 22, "pfcand_isNeutralHad": apid == 130,
                "pfcand_phirel": dphi, "pfcand_etarel": etasign * (c["eta"] - j["eta"]),
                "pfcand_deltaR": np.hypot(c["eta"] - j["eta"], dphi), "pfcand_abseta": np.abs(c["eta"]),
                "pfcand_pt_log": _log(weight * c["pt"]), "pfcand_ptrel": weight * c["pt"] / j["pt"],
                "pfcand_ptrel_log": _log(weight * c["pt"] / j["pt"]),
                "pfcand_pt_log_nopuppi": _log(c["pt"]), "pfcand_e_log_nopuppi": _log(c["energy"]),
                "pfcand_drsubjet1": np.full(rows.index.size, -1.0), "pfcand_drsubjet2": np.full(rows.index.size, -1.0),
            }
        out.update(dict.fromkeys(("pfcand_dptdpt", "pfcand_detadeta", "pfcand_dphidphi", "pfcand_dxydz",
                                  "pfcand_dphidxy", "pfcand_dlambdadz"), np.zeros(rows.index.size)))
        lazy: dict[str, Callable[[], np.ndarray]] = {
            "pfcand_puppiw": lambda: field("puppiWeight"),
            "pfcand_hcalFrac": lambda: np.where((apid == 1) | (apid == 130), field("hcalFraction"), 0.0),
            "pfcand_VTX_ass": lambda: field("pvAssocQuality"),
            "pfcand_lostInnerHits": lambda: field("lostInnerHits"),
            "pfcand_quality": lambda: np.where(track, field("trkQuality"), 0.0),
            "pfcand_normchi2": lambda: np.where(track, np.floor(field("trkChi2")), 999.0),
            "pfcand_dz": lambda: field("dz"), "pfcand_dxy": lambda: field("dxy"),
            "pfcand_dzsig": lambda: np.where(track, field("dz") / np.where(track, field("dzError"), 1.0), 0.0),
            "pfcand_dxysig": lambda: np.where(track, field("dxy") / np.where(track, field("dxyError"), 1.0), 0.0),
            "pfcand_dxydxy": lambda: np.where(track, field("dxyError") ** 2, 0.0),
            "pfcand_dzdz": lambda: np.where(track, field("dzError") ** 2, 0.0),
            "pfcand_drminsv": lambda: self._min_dr_sv(rows.jet, c["eta"], c["phi"]),
            "pfcand_erel": lambda: weight * c["energy"] / self._jet_energy(rows.jet),
            "pfcand_erel_log": lambda: _log(weight * c["energy"] / self._jet_energy(rows.jet)),
        }
        return _Lazy(out, lazy)

    def _min_dr_sv(self, jet: np.ndarray, eta: np.ndarray, phi: np.ndarray) -> np.ndarray:
        """ΔR of each row (of ``jet``) to the nearest SV of its event (∞ without SVs, CMS's ``mindrsvpfcand``
        start value); a minimum is exact, so the value does not depend on the batch."""
        s_eta, s_phi = np.asarray(self.svs["eta"], np.float64), np.asarray(self.svs["phi"], np.float64)
        row, sv = event_pairs(self.layout.jet_event[jet], self._offsets(self.svs, self.layout.sv_offsets))
        out = np.full(eta.size, np.inf)
        if sv.size:
            dr = np.hypot(eta[row] - s_eta[sv], delta_phi(phi[row], s_phi[sv]))
            count = np.bincount(row, minlength=eta.size)
            has = count > 0
            out[has] = np.minimum.reduceat(dr, (np.cumsum(count) - count)[has])
        return out

    def _pfcand_track(self) -> dict[str, np.ndarray]:
        rows, track = self.pf_rows, self._candidates()["track"]
        g = self._track_geometry(self.pf, "PF candidates", rows.index, rows.jet)
        values = {"pfcand_btagEtaRel": g["eta_rel"], "pfcand_btagPtRatio": g["pt_ratio"],
                  "pfcand_btagPParRatio": g["ppar_ratio"], "pfcand_btagSip2dVal": g["ip2d"],
                  "pfcand_btagSip2dSig": g["ip2d_sig"], "pfcand_btagSip3dVal": g["ip3d"],
                  "pfcand_btagSip3dSig": g["ip3d_sig"], "pfcand_btagJetDistVal": g["jet_distance"]}
        return {name: np.where(track, v, 0.0) for name, v in values.items()}

    def _sv_features(self) -> dict[str, np.ndarray]:
        rows = self.sv_rows
        v = {k: _take(self.svs[k], rows.index) for k in
             ("pt", "eta", "phi", "mass", "ntracks", "chi2", "dxy", "dxySig", "dlen", "dlenSig")}
        j = self._jet_columns(rows.jet)
        dphi = delta_phi(v["phi"], j["phi"])
        energy = _energy(v["pt"], v["eta"], v["mass"])
        angle = lambda: _take(self._field(self.svs, "SVs", "pAngle"), rows.index)  # noqa: E731
        lazy = {"sv_erel": lambda: energy / self._jet_energy(rows.jet),
                "sv_erel_log": lambda: _log(energy / self._jet_energy(rows.jet)),
                "sv_costhetasvpv": lambda: np.cos(angle())}
        return _Lazy({
            "sv_mask": np.ones(rows.index.size), "sv_pt": v["pt"], "sv_pt_log": _log(v["pt"]),
            "sv_ptrel": v["pt"] / j["pt"], "sv_ptrel_log": _log(v["pt"] / j["pt"]), "sv_mass": v["mass"],
            "sv_phirel": dphi, "sv_etarel": np.where(j["eta"] > 0, 1.0, -1.0) * (v["eta"] - j["eta"]),
            "sv_deltaR": np.hypot(v["eta"] - j["eta"], dphi), "sv_abseta": np.abs(v["eta"]),
            "sv_ntracks": v["ntracks"], "sv_normchi2": v["chi2"], "sv_dxy": v["dxy"], "sv_dxysig": v["dxySig"],
            "sv_d3d": v["dlen"], "sv_d3dsig": v["dlenSig"]}, lazy)

    # ParticleNetFeatureEvaluator ----------------------------------------------------------------------
    def _jet_pfcand(self) -> dict[str, np.ndarray]:
        rows, c = self.pf_rows, self._candidates()
        j = self._jet_columns(rows.jet)
        field = lambda name: _take(self._field(self.pf, "PF candidates", name), rows.index)  # noqa: E731
        apid, charged = c["apid"], c["charge"] != 0
        p3 = _p3(c["pt"], c["eta"], c["phi"])
        p = np.linalg.norm(p3, axis=1)
        cos = (p3 * j["axis"]).sum(axis=1) / p
        category = np.select(
            [(apid == 11) & charged, (apid == 13) & charged, (apid == 22) & ~charged,
             (apid != 22) & ~charged & (apid != 1) & (apid != 2), (apid != 11) & (apid != 13) & charged,
             ~charged & (apid == 1), ~charged & (apid == 2)], [0, 1, 2, 3, 4, 5, 6], -1)
        zero = np.zeros(rows.index.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = {
                "pfcand_mask": np.ones(rows.index.size),
                "jet_pfcand_pt_log": _nan_to_zero(_log(c["pt"])),
                "jet_pfcand_energy_log": _nan_to_zero(_log(c["energy"])), "jet_pfcand_eta": c["eta"],
                "jet_pfcand_deta": j["eta"] - c["eta"], "jet_pfcand_dphi": delta_phi(j["phi"], c["phi"]),
                "jet_pfcand_charge": c["charge"], "jet_pfcand_etarel": _nan_to_zero(eta_rel(j["axis"], p3)),
                "jet_pfcand_pperp_ratio": _nan_to_zero(np.sqrt(np.maximum(1 - cos**2, 0)) / p),
                "jet_pfcand_ppara_ratio": _nan_to_zero(cos), "jet_pfcand_id": category,
                "jet_pfcand_nstriphits": zero, "jet_pfcand_calofraction": zero, "jet_pfcand_tau_signal": zero,
            }
        out.update(dict.fromkeys(
            ("jet_pfcand_muon_id", "jet_pfcand_muon_isglobal", "jet_pfcand_muon_chi2", "jet_pfcand_muon_segcomp",
             "jet_pfcand_muon_nvalidhit", "jet_pfcand_muon_nstation", "jet_pfcand_electron_detaIn",
             "jet_pfcand_electron_dphiIn", "jet_pfcand_electron_sigIetaIeta", "jet_pfcand_electron_sigIphiIphi",
             "jet_pfcand_electron_r9", "jet_pfcand_electron_convProb", "jet_pfcand_photon_sigIetaIeta",
             "jet_pfcand_photon_r9", "jet_pfcand_photon_eVeto"), zero))
        lazy = {
            "jet_pfcand_frompv": lambda: field("fromPV"), "jet_pfcand_puppiw": lambda: field("puppiWeight"),
            "jet_pfcand_dz": lambda: field("dz"), "jet_pfcand_dxy": lambda: field("dxy"),
            "jet_pfcand_nlostinnerhits": lambda: field("lostInnerHits"),
            "jet_pfcand_npixhits": lambda: field("numberOfPixelHits"),
            "jet_pfcand_nhits": lambda: field("numberOfPixelHits"),
            "jet_pfcand_hcalfraction": lambda: _nan_to_zero(field("hcalFraction")),
        }
        return _Lazy(out, lazy, {name: (lambda name=name: self._jet_pfcand_track[name]) for name in TRACK_NAMES})

    @cached_property
    def _jet_pfcand_track(self) -> dict[str, np.ndarray]:
        return _track_features("jet_pfcand_", self.pf, "PF candidates", self.pf_rows, self._candidates()["track"], self)

    def _jet_sv(self) -> dict[str, np.ndarray]:
        rows = self.sv_rows
        v = {k: _take(self.svs[k], rows.index) for k in
             ("pt", "eta", "phi", "mass", "ntracks", "chi2", "dxySig", "dlen", "dlenSig", "dxy")}
        j = self._jet_columns(rows.jet)

        def signed(dims: int) -> np.ndarray:
            pos = np.stack([_take(self._field(self.svs, "SVs", k), rows.index) for k in "xyz"], axis=1)
            return np.where((pos[:, :dims] * j["axis"][:, :dims]).sum(axis=1) >= 0, 1.0, -1.0)

        return _Lazy({
            "sv_mask": np.ones(rows.index.size), "jet_sv_pt_log": _nan_to_zero(_log(v["pt"])), "jet_sv_eta": v["eta"],
            "jet_sv_mass": v["mass"], "jet_sv_deta": v["eta"] - j["eta"], "jet_sv_dphi": v["phi"] - j["phi"],
            "jet_sv_ntrack": v["ntracks"], "jet_sv_chi2": v["chi2"], "jet_sv_dxysig": np.abs(v["dxySig"]),
            "jet_sv_d3dsig": np.abs(v["dlenSig"])},
            {"jet_sv_dxy": lambda: signed(2) * v["dxy"], "jet_sv_d3d": lambda: signed(3) * v["dlen"]})

    def _jet_losttrack(self) -> dict[str, np.ndarray]:
        rows = self.lt_rows
        what = "lost tracks"
        field = lambda name: _take(self._field(self.lt, what, name), rows.index)  # noqa: E731
        pt, eta, phi = field("pt"), field("eta"), field("phi")
        j = self._jet_columns(rows.jet)
        out = {"lt_mask": np.ones(rows.index.size), "jet_losttrack_pt_log": _nan_to_zero(_log(pt)),
               "jet_losttrack_eta": eta, "jet_losttrack_deta": j["eta"] - eta,
               "jet_losttrack_dphi": delta_phi(j["phi"], phi),
               "jet_losttrack_etarel": _nan_to_zero(eta_rel(j["axis"], _p3(pt, eta, phi)))}
        lazy = {"jet_losttrack_charge": lambda: field("charge"), "jet_losttrack_frompv": lambda: field("fromPV"),
                "jet_losttrack_dz": lambda: field("dz"), "jet_losttrack_dxy": lambda: field("dxy"),
                "jet_losttrack_npixhits": lambda: field("numberOfPixelHits"),
                "jet_losttrack_nstriphits": lambda: field("stripLayers")}
        track = np.ones(rows.index.size, dtype=bool)
        geometry = {}

        def track_feature(name: str) -> np.ndarray:
            if not geometry:
                geometry.update(_track_features("jet_losttrack_", self.lt, what, rows, track, self))
            return geometry[name]

        return _Lazy(out, lazy, {f"jet_losttrack_{n}": (lambda n=n: track_feature(f"jet_losttrack_{n}"))
                                 for n in TRACK_SUFFIXES})


#: features of a track in ParticleNetFeatureEvaluator, 0 for candidates without one
TRACK_SUFFIXES = ("dzsig", "dxysig", "track_chi2", "track_qual", "trackjet_d3d", "trackjet_d3dsig",
                  "trackjet_dist", "trackjet_decayL")
TRACK_NAMES = tuple(f"jet_pfcand_{s}" for s in TRACK_SUFFIXES)


def _track_features(prefix: str, columns: Mapping[str, np.ndarray], what: str, rows: _Rows, track: np.ndarray,
                    info: TagInfo) -> dict[str, np.ndarray]:
    field = lambda name: _take(info._field(columns, what, name), rows.index)  # noqa: E731
    g = info._track_geometry(columns, what, rows.index, rows.jet)
    safe = lambda x: np.where(track, x, 1.0)  # noqa: E731
    with np.errstate(divide="ignore", invalid="ignore"):
        values = {"dzsig": _nan_to_zero(np.abs(field("dz")) / safe(field("dzError"))),
                  "dxysig": _nan_to_zero(np.abs(field("dxy")) / safe(field("dxyError"))),
                  "track_chi2": field("trkChi2"), "track_qual": field("trkQuality"),
                  "trackjet_d3d": _nan_to_zero(g["ip3d"]), "trackjet_d3dsig": _nan_to_zero(np.abs(g["ip3d_sig"])),
                  "trackjet_dist": _nan_to_zero(-g["jet_distance"]), "trackjet_decayL": _nan_to_zero(g["decay_length"])}
    return {prefix + k: np.where(track, v, 0.0) for k, v in values.items()}


class _Lazy(dict):
    """Features computed together (``eager``) plus ones computed only when asked for (``lazy``: they may
    need fields a sample does not have, which then fails only for a model that reads them)."""

    def __init__(self, eager: dict, lazy: dict, *more: dict):
        super().__init__(eager)
        self.lazy = {k: v for d in (lazy, *more) for k, v in d.items()}

    def names(self) -> tuple[str, ...]:
        return (*self.keys(), *self.lazy)


def _block_names(method: Callable) -> tuple[str, ...]:
    """The names a block method gives, found without data by running it on an empty event."""
    empty = TagInfo(TagInfoSettings(), {"pt": np.zeros(0), "eta": np.zeros(0), "phi": np.zeros(0)},
                    _EmptyColumns(), {"jetIdx": np.zeros(0, int), "pFCandsIdx": np.zeros(0, int)}, _EmptyColumns(),
                    _EmptyColumns())
    block = method(empty)
    return block.names() if isinstance(block, _Lazy) else tuple(block)


class _EmptyColumns(dict):
    def __missing__(self, key: str) -> np.ndarray:
        return np.zeros(0)


def _make_blocks() -> dict[str, Callable[[TagInfo], dict[str, np.ndarray]]]:
    """Feature name → the method that computes it with the other features of its block."""
    table: dict[str, Callable[[TagInfo], dict[str, np.ndarray]]] = {}
    for method in (TagInfo._pfcand_basic, TagInfo._pfcand_track, TagInfo._sv_features, TagInfo._jet_pfcand,
                   TagInfo._jet_sv, TagInfo._jet_losttrack):
        for name in _block_names(method):
            table.setdefault(name, method)
    return table


#: every feature name this module knows, with the method computing it
FEATURE_BLOCKS = _make_blocks()
