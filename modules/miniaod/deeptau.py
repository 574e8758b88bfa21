"""DeepTau: τ identification against jets, electrons and muons; all τs of a batch of events in one request.

Inputs in CMS's DeepTau v2 layout (see ``deeptau_inputs.py``): ``input_tau [43]``, and per grid
(``inner`` 11 × 11, ``outer`` 21 × 21) ``input_<grid>_egamma [n, n, 86]``, ``..._muon [n, n, 64]``,
``..._hadrons [n, n, 38]``; the reco-electron and reco-muon channels come from the ``Electron`` and
``Muon`` collections when the file has them (optional inputs: else those channels are 0).
Output: four probabilities (e, μ, τ, jet — CMS's order) per τ.

The producer is columnar: the inputs of every τ of a batch are built together (each τ paired only with its
own event's objects) and sent as one request, one row per τ; the inference client splits it at the model's
max_batch_size. A batch without τs sends nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future

import awkward as ak
import numpy as np

from ...framework import ConfigError, EventBatch, InputTag, Output, Param
from ...framework.inference import InferenceProducer
from .columns import flat_columns
from .deeptau_inputs import ELECTRON_FIELDS, MUON_FIELDS, PF_FIELDS, TAU_FIELDS, batch_deeptau_inputs

CLASSES = ("e", "mu", "tau", "jet")


def scores_from_probabilities(probs: np.ndarray) -> dict[str, np.ndarray]:
    """Per τ (float32): the four probabilities and CMS's discriminants VSe, VSmu, VSjet (τ/(τ+other), 0 where
    both are 0)."""
    scores = {name: np.ascontiguousarray(probs[:, i]) for i, name in enumerate(CLASSES)}
    with np.errstate(divide="ignore", invalid="ignore"):
        for other in ("e", "mu", "jet"):
            total = scores["tau"] + scores[other]
            scores[f"VS{other}"] = np.where(total > 0, scores["tau"] / total, 0.0).astype(np.float32)
    return scores


def per_event(scores: dict[str, np.ndarray], counts: np.ndarray) -> ak.Array:
    """Flat per-τ scores as one list of τ records per event: the layout (``nX`` + ``X_<field>`` branches) the
    per-event product (a dict of arrays) was written with."""
    return ak.unflatten(ak.zip(scores, depth_limit=1), counts)


class DeepTauProducer(InferenceProducer):
    """DeepTau scores for every τ candidate. Products: ``scores`` — per τ: e, mu, tau, jet and CMS's
    discriminants VSe = τ/(τ+e), VSmu = τ/(τ+μ), VSjet = τ/(τ+jet)."""

    columnar = True
    #: about two τs per event, each 0.42 MB of float32 grids, a copy of them in the request, and the (τ,
    #: candidate) pairs of the build with their float64 temporaries (a MiniAOD job's peak RSS grew by ~5.7 MB
    #: per event of a batch, this module the largest part)
    memory_per_event_mb = 4.0
    taus = InputTag("Tau", fields=TAU_FIELDS, doc="τ candidates with their pat::Tau-like variables")
    pfcands = InputTag("PFCands", fields=PF_FIELDS, doc="PF candidates (MiniAOD packedPFCandidates)")
    rho = InputTag("fixedGridRhoFastjetAll", doc="event energy density ρ (GeV per unit area)")
    electrons = InputTag("Electron", fields=ELECTRON_FIELDS, optional=True,
                         doc="reconstructed electrons (DeepTau's ele_* channels; absent: those channels are 0)")
    muons = InputTag("Muon", fields=MUON_FIELDS, optional=True,
                     doc="reconstructed muons (DeepTau's muon_* channels; absent: those channels are 0)")
    model = Param(str, "miniaod_deeptau", doc="model name in the repository")
    scores = Output("per τ (collection): e, mu, tau, jet probabilities and VSe, VSmu, VSjet")

    def begin_job(self) -> None:
        info = self.model_info()
        if len(info.outputs) != 1 or info.outputs[0].dims[-1] != len(CLASSES):
            raise ConfigError(f"model {self.model!r} must have one output of 4 probabilities (e, mu, tau, jet); it "
                              f"has {[(o.name, o.dims) for o in info.outputs]}", key=f"modules.{self.label}.model")
        self._output = info.outputs[0].name

    def acquire(self, events: EventBatch) -> Future | None:
        """One request with every τ of the batch (none when the batch has no τ)."""
        n = len(events)
        tau = flat_columns(events.get(self.taus), TAU_FIELDS, n)
        if tau.counts.sum() == 0:
            return None
        leptons = {"Electron": flat_columns(events.get(self.electrons), ELECTRON_FIELDS, n),
                   "Muon": flat_columns(events.get(self.muons), MUON_FIELDS, n)}  # absent: no rows, channels 0
        rho = np.asarray(events.get(self.rho), dtype=np.float64)
        inputs = batch_deeptau_inputs(flat_columns(events.get(self.pfcands), PF_FIELDS, n), tau, rho, leptons)
        return self.infer(inputs, [self._output])

    def produce(self, events: EventBatch, result: Mapping[str, np.ndarray] | None) -> None:
        counts = np.asarray(ak.num(events.get(self.taus), axis=1), dtype=np.int64)
        probs = np.zeros((0, len(CLASSES)), dtype=np.float32) if result is None else np.asarray(result[self._output])
        events.put("scores", per_event(scores_from_probabilities(probs), counts))
