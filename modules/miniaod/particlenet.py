"""ParticleNet jet tagging for AK4 or AK8 jets: one inference request per event with all its jets.

CMS's input layout (``pf_points [2, N]``, ``pf_features [20|25, N]``, ``pf_mask [1, N]``,
``sv_points [2, M]``, ``sv_features [11, M]``, ``sv_mask [1, M]``), so the project's models and
CMS's production models (``particlenet_AK4``, ``particlenet``) are interchangeable by model name::

    pnetAK4:
      type: ParticleNetTagger
      model: particlenet_ak4          # or CMS's particlenet_AK4
      discriminants: {BvsAll: [b, bb]}
"""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np

from ...framework import InputTag, Output, Param
from ...framework.errors import ConfigError
from ...framework.inference import InferenceProducer
from .columns import columns, model_labels
from .particlenet_features import particlenet_inputs
from .particlenet_inputs import INPUTS

PF_FIELDS = ("pt", "eta", "phi", "mass", "charge", "pdgId", "dxy", "dz", "dxyError", "dzError", "vx", "vy", "vz",
             "puppiWeight", "pvAssocQuality", "lostInnerHits", "trkChi2", "trkQuality")
SV_FIELDS = ("pt", "eta", "phi", "mass", "ntracks", "chi2", "dxy", "dxySig", "dlen", "dlenSig")
JET_FIELDS = ("pt", "eta", "phi")
MEMBER_FIELDS = ("jetIdx", "pFCandsIdx")


class ParticleNetTagger(InferenceProducer):
    """ParticleNet class probabilities for every jet of a collection (CMS inputs, all jets in one request).

    Products: ``scores`` — per jet, one field per class label of the model (its labels file) plus the
    requested discriminants (sums of class probabilities, e.g. ``BvsAll = b + bb``).
    """

    jets = InputTag("Jet", fields=JET_FIELDS, doc="jets to tag (AK4: Jet, AK8: FatJet)")
    constituents = InputTag("JetPFCands", fields=MEMBER_FIELDS,
                            doc="constituent index pairs (jetIdx, pFCandsIdx), NanoAOD-style")
    pfcands = InputTag("PFCands", fields=PF_FIELDS, doc="PF candidates (MiniAOD packedPFCandidates)")
    svs = InputTag("SV", fields=SV_FIELDS, doc="secondary vertices")
    preprocess = Param(str, "ak4", doc="CMS input definition: ak4 (20 PF features) or ak8 (25)",
                       choices=tuple(INPUTS))
    model = Param(str, "miniaod_particlenet_ak4", doc="model name in the repository")
    classes = Param(list[str], [], doc="names of the model's classes, in output order (default: the model's "
                                       "labels file; CMS's flav_names)")
    discriminants = Param(dict[str, list[str]], {}, doc="extra per-jet outputs: name → class labels whose "
                                                         "probabilities are summed (e.g. {BvsAll: [b, bb]})")
    scores = Output("per jet (collection): probability of each class, named by the model's labels, and discriminants")

    def begin_job(self) -> None:
        info = self.model_info()
        if len(info.outputs) != 1:
            raise ConfigError(f"model {self.model!r} has outputs {[o.name for o in info.outputs]}; ParticleNet "
                              f"has exactly one (the class probabilities)", key=f"modules.{self.label}.model")
        self._output = info.outputs[0].name
        n_classes = info.outputs[0].dims[-1]
        labels = list(self.classes) or model_labels(info, self._output)
        if len(labels) != n_classes:
            raise ConfigError(f"model {self.model!r} has {n_classes} classes but {len(labels)} names were found "
                              f"({labels}); give them with 'classes'", key=f"modules.{self.label}.classes")
        self._labels = [label.removeprefix("label_") for label in labels]
        self._sums: dict[str, np.ndarray] = {}
        for name, members in self.discriminants.items():
            unknown = [m for m in members if m not in self._labels]
            if unknown:
                raise ConfigError(f"discriminant {name!r} uses {unknown}, which are not classes of model "
                                  f"{self.model!r}: {self._labels}", key=f"modules.{self.label}.discriminants")
            self._sums[name] = np.array([self._labels.index(m) for m in members])
        self._spec = INPUTS[self.preprocess]

    def acquire(self, event) -> Future | None:
        jets = columns(event.get(self.jets), JET_FIELDS)
        if len(jets["pt"]) == 0:
            return None
        inputs = particlenet_inputs(self._spec, jets, columns(event.get(self.pfcands), PF_FIELDS),
                                    columns(event.get(self.constituents), MEMBER_FIELDS),
                                    columns(event.get(self.svs), SV_FIELDS))
        return self.infer(inputs, [self._output])

    def produce(self, event, result) -> None:
        if result is None:
            probs = np.zeros((0, len(self._labels)), dtype=np.float32)
        else:
            probs = result[self._output]
        scores = {label: probs[:, i] for i, label in enumerate(self._labels)}
        for name, index in self._sums.items():
            scores[name] = probs[:, index].sum(axis=1)
        event.put("scores", scores)
