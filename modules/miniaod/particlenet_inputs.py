"""The project's two ParticleNet versions, ``ak4`` and ``ak8``: a shipped preprocess.json and CMS's tag-info
settings for the jet type, and their inputs for one event's jets (what the producer, the training samples
and the tests build).

The preprocess.json files (``data/models/miniaod/miniaod_particlenet_ak{4,8}/preprocess.json``) hold the
values of CMS's ``ParticleNetAK4/CHS/V00`` (20 PF features, 8 to 50 particles, 1 to 5 SVs) and
``ParticleNetAK8/General/V01`` (25 PF features, 16 to 100 particles, 1 to 10 SVs), with the project models'
output names; CMS's production models ``particlenet_AK4`` and ``particlenet`` read the same inputs. The
settings are CMS's ``pfParticleNetAK4TagInfos`` (CHS: every constituent, by pT, SVs within 0.4) and
``pfParticleNetTagInfos`` (PUPPI: weight ≥ 0.01, by weighted pT, SVs within 0.8).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from ...framework import project_path
from .preprocess import Preprocess, build_inputs, load_preprocess
from .tag_info import TagInfo, TagInfoSettings

MODELS = project_path("data/models/miniaod").resolve()


@dataclass(frozen=True)
class ParticleNetInputs:
    """One version: its preprocess.json and tag-info settings."""

    name: str
    path: Path
    settings: TagInfoSettings

    @cached_property
    def preprocess(self) -> Preprocess:
        return load_preprocess(self.path)

    @property
    def parameters(self) -> dict[str, object]:
        """The settings as ``BoostedJetTags`` parameters (what ``ParticleNetTagger`` defaults to)."""
        s = self.settings
        return {"jet_radius": s.jet_radius, "min_puppi_weight": s.min_puppi_weight, "use_puppi_p4": s.use_puppi_p4}


AK4 = ParticleNetInputs("ak4", MODELS / "miniaod_particlenet_ak4" / "preprocess.json", TagInfoSettings(jet_radius=0.4))
AK8 = ParticleNetInputs("ak8", MODELS / "miniaod_particlenet_ak8" / "preprocess.json",
                        TagInfoSettings(jet_radius=0.8, min_puppi_weight=0.01, use_puppi_p4=True))
INPUTS = {"ak4": AK4, "ak8": AK8}


def particlenet_inputs(spec: ParticleNetInputs, jets: Mapping[str, np.ndarray], pf: Mapping[str, np.ndarray],
                       members: Mapping[str, np.ndarray], svs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The six ParticleNet inputs (``pf_points`` ... ``sv_mask``) for every jet of one event.

    Args:
        spec: the AK4 or AK8 version.
        jets: jet columns ``pt, eta, phi`` (numpy, one entry per jet).
        pf: PF-candidate columns (NanoAOD ``PFCands_*`` names).
        members: ``jetIdx``, ``pFCandsIdx`` — one row per constituent (NanoAOD-style).
        svs: secondary-vertex columns (NanoAOD ``SV_*`` names).
    """
    info = TagInfo(spec.settings, jets, pf, members, svs)
    return build_inputs(spec.preprocess, info.n_jets, info.entries, info.feature)
