"""ParticleNet AK4 or AK8 with the project's shipped input definitions: :class:`BoostedJetTags` configured
by one word (``preprocess: ak4|ak8``).

``ak4`` / ``ak8`` name the preprocess.json of the project's models (the values of CMS's ParticleNetAK4/CHS/V00
and ParticleNetAK8/General/V01, which CMS's ``particlenet_AK4`` and ``particlenet`` also read) and CMS's
tag-info settings for the jet type: AK4 CHS (SVs within 0.4, every constituent, ordered by pT) or AK8 PUPPI
(SVs within 0.8, constituents with a PUPPI weight ≥ 0.01, ordered by PUPPI-weighted pT). It reads only
the fields those versions need, so any MiniAOD-like input with them runs it::

    pnetAK4:
      type: ParticleNetTagger
      preprocess: ak4
      model: miniaod_particlenet_ak4      # or CMS's particlenet_AK4
      discriminants: {BvsAll: [b, bb]}    # sums of classes (a discriminator with no denominator)
"""

from __future__ import annotations

from ...framework import InputTag, Param
from .boosted_jet_tags import JET_FIELDS, PF_FIELDS, SV_FIELDS, BoostedJetTags
from .particlenet_inputs import INPUTS


class ParticleNetTagger(BoostedJetTags):
    """ParticleNet class probabilities for every jet of a collection (CMS inputs, all jets in one request).

    Products: ``scores`` — per jet, one field per class label of the model (its labels file) plus the
    requested discriminants (sums of class probabilities, e.g. ``BvsAll = b + bb``) and discriminators.
    """

    jets = InputTag("Jet", fields=JET_FIELDS, doc="jets to tag (AK4: Jet, AK8: FatJet)")
    pfcands = InputTag("PFCands", fields=PF_FIELDS, doc="PF candidates (MiniAOD packedPFCandidates)")
    svs = InputTag("SV", fields=SV_FIELDS, doc="secondary vertices")
    lost_tracks = InputTag("", doc="unused: the ak4/ak8 versions read no lost tracks")
    preprocess = Param(str, "ak4", doc="CMS input definition: ak4 (20 PF features) or ak8 (25)", choices=tuple(INPUTS))
    model = Param(str, "miniaod_particlenet_ak4", doc="model name in the repository")
    discriminants = Param(dict[str, list[str]], {}, doc="extra per-jet outputs: name → class labels whose "
                                                         "probabilities are summed (e.g. {BvsAll: [b, bb]})")

    @classmethod
    def validate_params(cls, given):
        """The version's tag-info settings are the defaults; parameters given explicitly win."""
        version = INPUTS.get(given.get("preprocess", cls.preprocess.default))
        return super().validate_params({**(version.parameters if version else {}), **given})

    def preprocess_path(self, info) -> str:
        return self.preprocess_json or str(INPUTS[self.preprocess].path)

    def discriminator_definitions(self) -> dict:
        return {**{name: {"numerator": classes} for name, classes in self.discriminants.items()},
                **self.discriminators}
