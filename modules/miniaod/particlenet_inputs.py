"""CMS's ParticleNet input definitions: variables, order, normalisation and lengths of each input.

These are the values of CMS's ``preprocess.json`` files (cms-data RecoBTag-Combined):
``ParticleNetAK4/CHS/V00`` (AK4: 20 PF features, 8 classes b, bb, c, cc, uds, g, undef, pu) and
``ParticleNetAK8/General/V01`` (AK8: 25 PF features, 20 classes probTbcq ... probQCDothers), which are
the models served in CMS's SONIC tests (``particlenet_AK4``, ``particlenet``). The project's own
models are trained on exactly these inputs, so either can be plugged in.

A value is transformed as CMS's ``center_norm_pad``: ``clip((x - center) * norm_factor, lower, upper)``
with non-finite values replaced by 0; padded positions are 0. Each variable-length input is padded
(or truncated, keeping the first — highest-pT — entries) to the largest multiplicity among the
event's jets, clamped to ``[min_length, max_length]``, as ``ParticleNetSonicJetTagsProducer`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

UNBOUNDED = 1e32


@dataclass(frozen=True)
class Variable:
    name: str
    center: float = 0.0
    norm: float = 1.0
    lower: float = -UNBOUNDED
    upper: float = UNBOUNDED


@dataclass(frozen=True)
class InputGroup:
    """One model input: its variables (rows of the ``[features, length]`` array) and lengths."""

    name: str
    variables: tuple[Variable, ...]
    min_length: int
    max_length: int


@dataclass(frozen=True)
class ParticleNetInputs:
    """Everything that differs between the AK4 and AK8 taggers' inputs."""

    name: str
    pf_points: InputGroup
    pf_features: InputGroup
    pf_mask: InputGroup
    sv_points: InputGroup
    sv_features: InputGroup
    sv_mask: InputGroup
    radius: float  # SVs within ΔR < radius of the jet axis belong to it
    puppi_weighted: bool  # AK8 PUPPI jets: order by weighted pT, drop candidates with weight < 0.01

    @property
    def groups(self) -> tuple[InputGroup, ...]:
        return (self.pf_points, self.pf_features, self.pf_mask, self.sv_points, self.sv_features, self.sv_mask)


def _b(name: str, center: float, norm: float) -> Variable:
    """A variable bounded to [-5, 5] after normalisation (most of CMS's)."""
    return Variable(name, center, norm, -5.0, 5.0)


def _make(name: str, pf: tuple[Variable, ...], sv: tuple[Variable, ...], pf_len: tuple[int, int],
          sv_len: tuple[int, int], radius: float, puppi: bool) -> ParticleNetInputs:
    rel = (Variable("pfcand_etarel"), Variable("pfcand_phirel"))
    sv_rel = (Variable("sv_etarel"), Variable("sv_phirel"))
    return ParticleNetInputs(
        name=name,
        pf_points=InputGroup("pf_points", rel, *pf_len), pf_features=InputGroup("pf_features", pf, *pf_len),
        pf_mask=InputGroup("pf_mask", (Variable("pfcand_mask"),), *pf_len),
        sv_points=InputGroup("sv_points", sv_rel, *sv_len), sv_features=InputGroup("sv_features", sv, *sv_len),
        sv_mask=InputGroup("sv_mask", (Variable("sv_mask"),), *sv_len), radius=radius, puppi_weighted=puppi)


AK4 = _make(
    "ak4",
    pf=(_b("pfcand_pt_log_nopuppi", 0.8, 0.7), _b("pfcand_e_log_nopuppi", 1.2, 0.6), Variable("pfcand_etarel"),
        Variable("pfcand_phirel"), _b("pfcand_abseta", 0.8, 1.2), Variable("pfcand_charge"),
        _b("pfcand_VTX_ass", 4.0, 0.3), Variable("pfcand_lostInnerHits"), _b("pfcand_normchi2", 5.0, 0.2),
        _b("pfcand_quality", 0.0, 0.2), _b("pfcand_dz", 0.0, 150.0), _b("pfcand_dzsig", 0.0, 0.7),
        _b("pfcand_dxy", 0.0, 270.0), _b("pfcand_dxysig", 1.1, 1.0), _b("pfcand_btagEtaRel", 2.1, 0.5),
        _b("pfcand_btagPtRatio", 0.0, 1.0), _b("pfcand_btagPParRatio", 0.0, 1.0), _b("pfcand_btagSip3dVal", 0.0, 90.0),
        _b("pfcand_btagSip3dSig", 0.0, 0.5), _b("pfcand_btagJetDistVal", 0.0, 50.0)),
    sv=(_b("sv_pt_log", 2.8, 0.8), _b("sv_mass", 1.1, 0.6), Variable("sv_etarel"), Variable("sv_phirel"),
        _b("sv_abseta", 0.8, 1.2), _b("sv_ntracks", 3.0, 0.5), _b("sv_normchi2", 0.7, 0.7), _b("sv_dxy", 0.2, 0.6),
        _b("sv_dxysig", 5.0, 0.03), _b("sv_d3d", 0.35, 0.4), _b("sv_d3dsig", 5.0, 0.03)),
    pf_len=(8, 50), sv_len=(1, 5), radius=0.4, puppi=False)

AK8 = _make(
    "ak8",
    pf=(_b("pfcand_pt_log_nopuppi", 1.0, 0.5), _b("pfcand_e_log_nopuppi", 1.3, 0.5), Variable("pfcand_etarel"),
        Variable("pfcand_phirel"), _b("pfcand_abseta", 0.6, 1.6), Variable("pfcand_charge"), Variable("pfcand_isEl"),
        Variable("pfcand_isMu"), Variable("pfcand_isGamma"), Variable("pfcand_isChargedHad"),
        Variable("pfcand_isNeutralHad"), _b("pfcand_VTX_ass", 4.0, 0.3), Variable("pfcand_lostInnerHits"),
        _b("pfcand_normchi2", 5.0, 0.2), _b("pfcand_quality", 0.0, 0.2), _b("pfcand_dz", 0.0, 180.0),
        _b("pfcand_dzsig", 0.0, 0.9), _b("pfcand_dxy", 0.0, 300.0), _b("pfcand_dxysig", 0.0, 1.0),
        _b("pfcand_btagEtaRel", 1.5, 0.5), _b("pfcand_btagPtRatio", 0.0, 1.0), _b("pfcand_btagPParRatio", 0.0, 1.0),
        _b("pfcand_btagSip3dVal", 0.0, 100.0), _b("pfcand_btagSip3dSig", 0.0, 0.5),
        _b("pfcand_btagJetDistVal", 0.0, 40.0)),
    sv=(_b("sv_pt_log", 4.0, 0.6), _b("sv_mass", 1.2, 0.3), Variable("sv_etarel"), Variable("sv_phirel"),
        _b("sv_abseta", 0.5, 1.6), _b("sv_ntracks", 3.0, 1.0), _b("sv_normchi2", 0.8, 0.6), _b("sv_dxy", 0.4, 0.25),
        _b("sv_dxysig", 7.0, 0.02), _b("sv_d3d", 0.5, 0.2), _b("sv_d3dsig", 7.0, 0.02)),
    pf_len=(16, 100), sv_len=(1, 10), radius=0.8, puppi=True)

INPUTS = {"ak4": AK4, "ak8": AK8}
