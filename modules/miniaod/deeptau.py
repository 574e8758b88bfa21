"""DeepTau: τ identification against jets, electrons and muons; all τs of an event in one request.

Inputs in CMS's DeepTau v2 layout (see ``deeptau_inputs.py``): ``input_tau [43]``, and per grid
(``inner`` 11 × 11, ``outer`` 21 × 21) ``input_<grid>_egamma [n, n, 86]``, ``..._muon [n, n, 64]``,
``..._hadrons [n, n, 38]``; the reco-electron and reco-muon channels come from the ``Electron`` and
``Muon`` collections when the file has them (optional inputs: else those channels are 0).
Output: four probabilities (e, μ, τ, jet — CMS's order) per τ.
"""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np

from ...framework import InputTag, Output, Param
from ...framework.errors import ConfigError
from ...framework.inference import InferenceProducer
from .columns import columns
from .deeptau_inputs import ELECTRON_FIELDS, MUON_FIELDS, PF_FIELDS, TAU_FIELDS, deeptau_inputs

CLASSES = ("e", "mu", "tau", "jet")


class DeepTauProducer(InferenceProducer):
    """DeepTau scores for every τ candidate. Products: ``scores`` — per τ: e, mu, tau, jet and CMS's
    discriminants VSe = τ/(τ+e), VSmu = τ/(τ+μ), VSjet = τ/(τ+jet)."""

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

    def acquire(self, event) -> Future | None:
        tau = columns(event.get(self.taus), TAU_FIELDS)
        if len(tau["pt"]) == 0:
            return None
        leptons = {"Electron": columns(event.get(self.electrons), ELECTRON_FIELDS),
                   "Muon": columns(event.get(self.muons), MUON_FIELDS)}  # absent: no rows, channels 0
        inputs = deeptau_inputs(columns(event.get(self.pfcands), PF_FIELDS), tau, float(event.get(self.rho)), leptons)
        return self.infer(inputs, [self._output])

    def produce(self, event, result) -> None:
        probs = np.zeros((0, 4), dtype=np.float32) if result is None else result[self._output]
        scores = {name: probs[:, i] for i, name in enumerate(CLASSES)}
        with np.errstate(divide="ignore", invalid="ignore"):
            for other in ("e", "mu", "jet"):
                total = scores["tau"] + scores[other]
                scores[f"VS{other}"] = np.where(total > 0, scores["tau"] / total, 0.0).astype(np.float32)
        event.put("scores", scores)
