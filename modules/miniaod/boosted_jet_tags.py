"""Any ParticleNet-family tagger, defined by its model folder and ``preprocess.json``: CMS's
``BoostedJetONNXJetTagsProducer`` / ``ParticleNetSonicJetTagsProducer`` with the tag-info producer in front.

The module is columnar: one call gets a batch of events. The model's inputs are built from the named features
(``tag_info.py``) exactly as its ``preprocess.json`` says (``preprocess.py``), for all jets of all the batch's
events at once, padded across the batch as CMS's SONIC producer pads across an event's jets, and sent as one
request (the inference client splits it at the model's max_batch_size); one score per output name is written
per jet, plus discriminators (``discriminators.py``). A new tagger version is a configuration, not code::

    pnetAK4:
      type: BoostedJetTags
      model: particlenet_AK4              # the repository entry; its folder holds preprocess.json
      jets: Jet
      constituents: JetPFCands
      jet_radius: 0.4
      discriminators:
        BvsAll: {numerator: [b, bb], denominator: [b, bb, c, cc, uds, g]}

Jets CMS's tag-info producer leaves empty — below ``min_jet_pt``, outside the |η| window, without constituents,
or with no constituent, SV (or lost track) left after its cuts — are not sent to the model: every output of
theirs is 0, as CMS's ``BoostedJetONNXJetTagsProducer`` and ``ParticleNetSonicJetTagsProducer`` write it, and
a discriminator with a denominator is CMS's undefined marker (-10). When the job starts, the preprocess.json
is checked against the model's declared inputs (names, data type, features, fixed lengths), so a file paired
with the wrong model is one error naming both.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future

import awkward as ak
import numpy as np

from ...framework import ConfigError, InputTag, Output, Param, gather, then
from ...framework.inference import InferenceProducer
from .columns import Flat, flat_columns, model_labels
from .discriminators import make_discriminators
from .preprocess import Entries, build_inputs, find_preprocess, jet_lengths, load_preprocess, model_mismatch
from .tag_info import FEATURE_BLOCKS, MissingInput, TagInfo, TagInfoSettings, collection_of

#: fields read by every ParticleNet version the project knows (the from-MiniAOD and the costheta / signed
#: SV features add the others of ``BoostedJetTags``)
PF_FIELDS = ("pt", "eta", "phi", "mass", "charge", "pdgId", "dxy", "dz", "dxyError", "dzError", "vx", "vy", "vz",
             "puppiWeight", "pvAssocQuality", "lostInnerHits", "trkChi2", "trkQuality")
SV_FIELDS = ("pt", "eta", "phi", "mass", "ntracks", "chi2", "dxy", "dxySig", "dlen", "dlenSig")
JET_FIELDS = ("pt", "eta", "phi")
MEMBER_FIELDS = ("jetIdx", "pFCandsIdx")
LOST_TRACK_FIELDS = ("pt", "eta", "phi", "charge", "dxy", "dz", "dxyError", "dzError", "vx", "vy", "vz", "fromPV",
                     "numberOfPixelHits", "stripLayers", "trkChi2", "trkQuality")


class BoostedJetTags(InferenceProducer):
    """Scores of a ParticleNet-family model for every jet of a collection, its inputs built from the model's
    ``preprocess.json`` and CMS's named jet features (all jets of a batch of events in one request).

    Products: ``scores`` — per event, per jet, one field per output name (the ``classes`` given, else the
    model's labels file, else preprocess.json's ``output_names`` without ``label_``) plus the configured
    ``discriminators``; 0 for every output of a jet CMS's tag-info producer leaves empty (not sent to the
    model).
    """

    #: a batch of events per call: the jets of all of them make one request
    columnar = True
    #: building the inputs peaks at ~0.35 MB per event for AK4 jets of a generated ttbar/QCD sample (~15 jets,
    #: ~260 constituents; the request itself ~0.07 MB), AK8 a tenth of that: half a MB leaves room for busier events
    memory_per_event_mb = 0.5

    jets = InputTag("Jet", fields=(*JET_FIELDS, "mass"), doc="jets to tag (AK4: Jet, AK8: FatJet)")
    constituents = InputTag("JetPFCands", fields=MEMBER_FIELDS,
                            doc="constituent index pairs (jetIdx, pFCandsIdx), NanoAOD-style")
    pfcands = InputTag("PFCands", fields=(*PF_FIELDS, "fromPV", "numberOfPixelHits", "hcalFraction"),
                       doc="PF candidates (MiniAOD packedPFCandidates)")
    svs = InputTag("SV", fields=(*SV_FIELDS, "x", "y", "z", "pAngle"), doc="secondary vertices")
    lost_tracks = InputTag("LostTracks", fields=LOST_TRACK_FIELDS, optional=True,
                           doc="lost tracks (MiniAOD lostTracks), read by the from-MiniAOD models' lt_* inputs")
    model = Param(str, doc="model name in the repository (a Triton repository entry)")
    preprocess_json = Param(str, "", doc="the model's preprocess.json (default: the one in the model's folder); "
                                         "$NAME is taken from the environment")
    classes = Param(list[str], [], doc="names of the model's outputs, in order (default: the model's labels file, "
                                       "else preprocess.json's output_names)")
    discriminators = Param(dict[str, dict[str, list[str]]], {},
                           doc="name → {numerator: [classes], denominator: [classes]}: sum over sum, as CMS's "
                               "BTagProbabilityToDiscriminator (empty denominator: the sum)")
    jet_radius = Param(float, 0.8, doc="SVs within this ΔR of the jet axis belong to it (CMS jet_radius)", above=0)
    min_jet_pt = Param(float, 0.0, doc="jets below are not scored: every output 0 (CMS min_jet_pt), GeV", min=0)
    min_jet_eta = Param(float, 0.0, doc="jets within |eta| below are not scored (CMS min_jet_eta: the from-MiniAOD "
                                        "Forward versions)", min=0)
    max_jet_eta = Param(float, 99.0, doc="jets beyond |eta| are not scored (CMS max_jet_eta)", above=0)
    raw_factor = InputTag("", doc="the jets' NanoAOD rawFactor branch (e.g. Jet_rawFactor; raw pT = pt·(1 − "
                                  "rawFactor)): the from-MiniAOD versions then score a jet whose corrected or raw "
                                  "pT reaches min_jet_pt, as ParticleNetFeatureEvaluator does (empty: pt is raw)")
    min_puppi_weight = Param(float, -1.0, doc="constituents with a lower PUPPI weight are dropped (CMS min_puppi_wgt)")
    use_puppi_p4 = Param(bool, False, doc="order constituents by PUPPI-weighted pT and weight the *_log/*rel "
                                          "features (CMS use_puppiP4; AK8 PUPPI jets)")
    min_pt_for_pfcandidates = Param(float, -1.0, doc="constituents below are dropped (CMS min_pt_for_pfcandidates)")
    lost_track_max_dr = Param(float, 0.4, doc="lost tracks within this ΔR of the jet (CMS max_dr_for_losttrack)",
                              above=0)
    lost_track_min_pt = Param(float, 1.0, doc="lost tracks above this pT, GeV (CMS min_pt_for_losttrack)")
    scores = Output("per jet (collection): one score per output name of the model, and the discriminators")

    def settings(self) -> TagInfoSettings:
        """The tag-info producer's selection from this module's parameters."""
        return TagInfoSettings(jet_radius=self.jet_radius, min_jet_pt=self.min_jet_pt, min_jet_eta=self.min_jet_eta,
                               max_jet_eta=self.max_jet_eta,
                               min_puppi_weight=self.min_puppi_weight, use_puppi_p4=self.use_puppi_p4,
                               min_pt_for_pfcandidates=self.min_pt_for_pfcandidates,
                               lost_track_max_dr=self.lost_track_max_dr, lost_track_min_pt=self.lost_track_min_pt,
                               feature_evaluator=self._feature_evaluator)

    def preprocess_path(self, info) -> str:
        """``preprocess_json``, or the model folder's preprocess.json."""
        folders = [f for f in (info.path, info.local.path if info.local is not None else None) if f is not None]
        return str(find_preprocess(self.preprocess_json, folders, self.model))

    def begin_job(self) -> None:
        key = f"modules.{self.label}"
        info = self.model_info()
        try:
            self._spec = load_preprocess(self.preprocess_path(info))
        except ConfigError as err:
            raise ConfigError(err.reason, key=f"{key}.preprocess_json") from None
        unknown = [name for name in self._spec.feature_names if name not in FEATURE_BLOCKS]
        if unknown:
            raise ConfigError(f"{self._spec.path!r} uses features this producer does not compute: {unknown} (known: "
                              f"the pfcand_*, sv_*, jet_pfcand_*, jet_sv_*, jet_losttrack_* features of CMS's "
                              f"ParticleNet family)", key=f"{key}.preprocess_json")
        mismatch = model_mismatch(self._spec, info.inputs, batched=info.max_batch_size > 0)
        if mismatch:
            raise ConfigError(f"{self._spec.path!r} does not fit model {self.model!r} ({_model_file(info)}): "
                              f"{mismatch}", key=f"{key}.preprocess_json")
        self._needs_lost_tracks = any(collection_of(n) == "lt" for n in self._spec.feature_names)
        # ParticleNetFeatureEvaluator's names (the from-MiniAOD versions) select jets by its rule
        self._feature_evaluator = any(n.startswith(("jet_", "lt_")) for n in self._spec.feature_names)
        if len(info.outputs) != 1:
            raise ConfigError(f"model {self.model!r} has outputs {[o.name for o in info.outputs]}; a ParticleNet-"
                              f"family model has exactly one (its scores)", key=f"{key}.model")
        self._output = info.outputs[0].name
        n_scores = info.outputs[0].dims[-1]
        names = list(self.classes) or (model_labels(info, self._output) if info.labels.get(self._output) else [])
        names = names or [name.removeprefix("label_") for name in self._spec.output_names] or \
            model_labels(info, self._output)
        if len(names) != n_scores:
            raise ConfigError(f"model {self.model!r} has {n_scores} classes but {len(names)} names were found "
                              f"({names}); give them with 'classes'", key=f"{key}.classes")
        self._labels = [name.removeprefix("label_") for name in names]
        self._discriminators = make_discriminators(self.discriminator_definitions(), self._labels, self.model,
                                                   f"{key}.discriminators")

    def discriminator_definitions(self) -> dict:
        """The configured discriminators (a subclass may add its own spelling)."""
        return dict(self.discriminators)

    def jet_columns(self, events) -> Flat:
        """The batch's jets, flattened (what counts the rows of the request and splits the scores back), with
        their ``raw_pt`` when ``raw_factor`` names a branch."""
        jets = flat_columns(events.get(self.jets), type(self).jets.fields, len(events))
        if not self.raw_factor:
            return jets
        factor = np.asarray(ak.flatten(events.get(self.raw_factor), axis=None), dtype=np.float64)
        if factor.size != jets.counts.sum():
            raise ConfigError(f"{self.raw_factor!r} has {factor.size} values for {int(jets.counts.sum())} jets of "
                              f"{self.jets!r}: it must be the jets' own branch", key=f"modules.{self.label}.raw_factor")
        return Flat({**jets.columns, "raw_pt": jets.columns["pt"] * (1.0 - factor)}, jets.counts)

    def tag_info(self, events, jets: Flat | None = None) -> TagInfo:
        """The batch's tag info (CMS's tag-info producer): named features of every jet of every event."""
        lost = events.get(self.lost_tracks) if self.lost_tracks else None
        if self._needs_lost_tracks and lost is None:
            raise ConfigError(f"{self._spec.path!r} reads lost-track features (jet_losttrack_*), but the input has "
                              f"no {self.lost_tracks!r} collection: generate events with `sonic data generate "
                              f"miniaod` (which writes LostTracks_*)", key=f"modules.{self.label}.lost_tracks")
        declared, n = type(self), len(events)
        return TagInfo.of_batch(self.settings(), jets if jets is not None else self.jet_columns(events),
                                flat_columns(events.get(self.pfcands), declared.pfcands.fields, n),
                                flat_columns(events.get(self.constituents), declared.constituents.fields, n),
                                flat_columns(events.get(self.svs), declared.svs.fields, n),
                                None if lost is None else flat_columns(lost, declared.lost_tracks.fields, n))

    def inputs_for(self, n_jets: int, entries: Callable[[str], Entries],
                   feature: Callable[[str], np.ndarray]) -> dict[str, np.ndarray]:
        """The model's inputs for ``n_jets`` jets of the tag info (their ``entries`` and ``feature`` values), in
        preprocess.json's order."""
        try:
            return build_inputs(self._spec, n_jets, entries, feature)
        except MissingInput as err:
            raise ConfigError(f"{self._spec.path!r} needs {err.args[0]}, which the input does not have",
                              key=f"modules.{self.label}") from None

    def acquire(self, events) -> Future | dict[str, np.ndarray] | None:
        """The batch's filled jets (:attr:`TagInfo.filled`) in as few requests as the model's max_batch_size
        allows; none when no jet is filled. The other jets are not sent: every output of theirs is 0, as CMS
        writes it. One request is padded to its longest jet (CMS's rule); when the jets need several, they are
        ordered by length first, so each request is padded only to the longest of its own jets."""
        jets = self.jet_columns(events)
        if jets.counts.sum() == 0:
            return None
        info = self.tag_info(events, jets)
        filled = info.filled
        n_jets = int(filled.sum())
        every = lambda rows: {self._output: _spread(rows, filled)}  # noqa: E731 - the filled jets' rows among all
        if n_jets == 0:
            return every(np.zeros((0, len(self._labels)), np.float32))
        entries, feature = _only(info, filled)
        inputs = self.inputs_for(n_jets, entries, feature)
        limit = self.model_info().max_batch_size
        if limit <= 0 or n_jets <= limit:
            return then(self.infer(inputs, [self._output]), lambda answer: every(answer[self._output]))
        lengths = jet_lengths(self._spec, entries)
        order = np.lexsort(tuple(lengths.values())[::-1])  # by the first input's length, then the next ...
        parts = np.array_split(order, -(-n_jets // limit))
        requests = [self.infer({name: array[rows, :, :int(lengths[name][rows].max())]
                                for name, array in inputs.items()}, [self._output]) for rows in parts]
        return then(gather(requests), lambda answers: every(_unsort(
            np.concatenate([answer[self._output] for answer in answers]), order)))

    def produce(self, events, result) -> None:
        """``scores``: the request's rows (the batch's jets, event after event) split back into events, one
        list of per-jet records per event — the layout per-event dicts of per-jet arrays are stacked into, so
        the written branches are the same (counter ``nX``, branches ``X_<field>``)."""
        counts = flat_columns(events.get(self.jets), (), len(events)).counts
        probs = np.zeros((0, len(self._labels)), dtype=np.float32) if result is None else result[self._output]
        scores = {label: probs[:, i] for i, label in enumerate(self._labels)}
        for discriminator in self._discriminators:
            scores[discriminator.name] = discriminator(probs)
        records = ak.zip({name: np.ascontiguousarray(values) for name, values in scores.items()}, depth_limit=1)
        events.put("scores", ak.unflatten(records, counts))


def _only(info: TagInfo, keep: np.ndarray) -> tuple[Callable[[str], Entries], Callable[[str], np.ndarray]]:
    """``info``'s entries and feature values of the jets where ``keep`` is True, the jets numbered among
    themselves (``info``'s own when every jet is kept)."""
    if keep.all():
        return info.entries, info.feature
    number = np.cumsum(keep) - 1

    def entries(name: str) -> Entries:
        rows = info.entries(name)
        mine = keep[rows.jet]
        return Entries(number[rows.jet[mine]], rows.rank[mine], rows.counts[keep])

    def feature(name: str) -> np.ndarray:
        return info.feature(name)[keep[info.entries(name).jet]]

    return entries, feature


def _spread(rows: np.ndarray, filled: np.ndarray) -> np.ndarray:
    """One row per jet: ``rows`` for the filled jets, in order, and 0 for every output of the others (what
    CMS's jet-tag producers write for a jet with empty features)."""
    out = np.zeros((filled.size, rows.shape[1]), dtype=rows.dtype)
    out[filled] = rows
    return out


def _model_file(info) -> str:
    """Where the model's file is, for a message: its repository file, or the server that has it."""
    local = info if info.path is not None else info.local
    return str(local.model_file()) if local is not None else "known only from its server"


def _unsort(rows: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``rows`` computed in ``order`` put back in the original order."""
    out = np.empty_like(rows)
    out[order] = rows
    return out
