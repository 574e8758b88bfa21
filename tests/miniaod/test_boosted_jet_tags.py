"""BoostedJetTags: CMS's named jet features on hand-checked jets, inputs built exactly as a preprocess.json
says (CMS's two shared ones included, with the model run on them), CMS's discriminator ratios, and every
configured tagger giving the same scores direct and through one Triton server.

The expected feature values are computed here by hand, jet by jet with ``math`` on scalars, from CMS's
definitions (DeepBoostedJetTagInfoProducer, ParticleNetFeatureEvaluator, TrackInfoBuilder, btau::etaRel),
never by calling the code under test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import uproot
import yaml

from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.errors import ConfigError, SonicError
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.framework.process import Process
from sonic_hep.modules.miniaod.discriminators import UNDEFINED, Discriminator, make_discriminators
from sonic_hep.modules.miniaod.preprocess import build_inputs, load_preprocess
from sonic_hep.modules.miniaod.tag_info import TagInfo, TagInfoSettings

from tests.conftest import shared_path
from tests.miniaod.conftest import branches

PROJECT = Path(__file__).resolve().parents[2]
PION = 0.13957018
JET = {"pt": 100.0, "eta": 0.5, "phi": 0.2, "mass": 10.0}


def wrap(x: float) -> float:
    return (x + math.pi) % (2 * math.pi) - math.pi


def track(pt, eta, phi, charge, pdg, dxy=0.0, dz=0.0, puppi=1.0, mass=None, **more) -> dict:
    """One PF candidate / lost track: a straight track whose reference point is its closest approach in xy."""
    is_track = charge != 0
    row = {"pt": pt, "eta": eta, "phi": phi, "charge": charge, "pdgId": pdg,
           "mass": (PION if is_track else 0.0) if mass is None else mass, "dxy": dxy, "dz": dz,
           "dxyError": 0.002 if is_track else 0.0, "dzError": 0.004 if is_track else 0.0,
           "vx": -dxy * math.sin(phi), "vy": dxy * math.cos(phi), "vz": dz, "puppiWeight": puppi,
           "pvAssocQuality": 7 if is_track else 0, "fromPV": 3 if is_track else 1,
           "lostInnerHits": -1 if is_track else 0, "trkChi2": 1.7 if is_track else 0.0,
           "trkQuality": 4 if is_track else 0, "numberOfPixelHits": 4 if is_track else 0, "hcalFraction": 0.0,
           "stripLayers": 10}
    row.update(more)
    return row


def table(rows: list[dict]) -> dict[str, np.ndarray]:
    return {k: np.array([r[k] for r in rows], dtype=float) for k in rows[0]} if rows else {}


#: a π+ of 40 GeV (PUPPI weight 0.5), a 30 GeV photon, a soft π- nearly removed by PUPPI, a neutral hadron
CANDS = [track(40.0, 0.6, 0.25, 1, 211, dxy=0.01, dz=0.02, puppi=0.5),
         track(30.0, 0.45, 0.1, 0, 22),
         track(5.0, 0.3, 0.35, -1, -211, dxy=-0.004, dz=0.01, puppi=0.005),
         track(12.0, 0.7, 0.3, 0, 130, hcalFraction=0.9)]
#: two SVs in the jet (dxy significance 5 and 12) and one far away
SVS = [dict(pt=10.0, eta=0.55, phi=0.22, mass=1.5, ntracks=3, chi2=0.9, dxy=0.3, dxySig=5.0, dlen=0.4, dlenSig=7.0,
            x=0.29, y=0.07, z=0.25, pAngle=0.05),
       dict(pt=8.0, eta=0.4, phi=0.3, mass=2.0, ntracks=4, chi2=1.1, dxy=0.5, dxySig=12.0, dlen=0.6, dlenSig=15.0,
            x=-0.49, y=-0.1, z=-0.3, pAngle=0.02),
       dict(pt=6.0, eta=2.0, phi=-2.5, mass=1.0, ntracks=2, chi2=1.0, dxy=0.1, dxySig=4.0, dlen=0.2, dlenSig=4.0,
            x=0.1, y=0.0, z=0.1, pAngle=0.1)]
#: lost tracks: one in the jet, one too soft, one outside ΔR 0.4
LOST = [track(3.0, 0.55, 0.15, -1, -211, dxy=0.02, dz=-0.01), track(0.7, 0.5, 0.2, 1, 211),
        track(5.0, 1.5, 0.2, 1, 211)]


def make_info(settings: TagInfoSettings, jets: list[dict] | None = None) -> TagInfo:
    jets = jets or [JET]
    return TagInfo(settings, table(jets), table(CANDS),
                   {"jetIdx": np.zeros(len(CANDS), int), "pFCandsIdx": np.arange(len(CANDS))}, table(SVS), table(LOST))


def by_rank(info: TagInfo, name: str) -> list[float]:
    """A feature's values of jet 0 in the order of the model's input."""
    entries, values = info.entries(name), info.feature(name)
    mine = entries.jet == 0
    return values[mine][np.argsort(entries.rank[mine])].tolist()


def unit_jet() -> tuple[float, float, float]:
    c = math.cosh(JET["eta"])
    return math.cos(JET["phi"]) / c, math.sin(JET["phi"]) / c, math.sinh(JET["eta"]) / c


def momentum(c: dict) -> tuple[float, float, float]:
    return c["pt"] * math.cos(c["phi"]), c["pt"] * math.sin(c["phi"]), c["pt"] * math.sinh(c["eta"])


def test_chs_candidate_features_follow_cms():
    """AK4 CHS settings: every constituent, ordered by raw pT: π+ (40), γ (30), neutral hadron (12), π- (5)."""
    info = make_info(TagInfoSettings(jet_radius=0.4))
    pi, gamma, soft, nh = CANDS
    assert by_rank(info, "pfcand_pt_log_nopuppi") == pytest.approx([math.log(c["pt"]) for c in (pi, gamma, nh, soft)])
    assert by_rank(info, "pfcand_etarel") == pytest.approx([0.1, -0.05, 0.2, -0.2])  # η(jet) > 0: not flipped
    assert by_rank(info, "pfcand_phirel") == pytest.approx([0.05, -0.1, 0.1, 0.15])
    assert by_rank(info, "pfcand_isChargedHad") == [1, 0, 0, 1] and by_rank(info, "pfcand_isNeutralHad") == [0, 0, 1, 0]
    assert by_rank(info, "pfcand_hcalFrac") == pytest.approx([0, 0, 0.9, 0])  # only for neutral hadrons
    assert by_rank(info, "pfcand_normchi2") == [1.0, 999.0, 999.0, 1.0]  # floor(χ²/ndf); 999 without a track
    assert by_rank(info, "pfcand_dxysig") == pytest.approx([5.0, 0.0, 0.0, -2.0])  # signed dxy / σ
    energy = math.sqrt((pi["pt"] * math.cosh(pi["eta"])) ** 2 + PION**2)
    assert by_rank(info, "pfcand_e_log_nopuppi")[0] == pytest.approx(math.log(energy))
    jet_e = math.sqrt((JET["pt"] * math.cosh(JET["eta"])) ** 2 + JET["mass"] ** 2)
    assert by_rank(info, "pfcand_erel_log")[0] == pytest.approx(math.log(energy / jet_e))
    # track variables of the π+ (TrackInfoBuilder): btau::etaRel gives the track the pion mass
    u, p = unit_jet(), momentum(pi)
    along = sum(a * b for a, b in zip(u, p))
    p_mag = math.sqrt(sum(x * x for x in p))
    e_pion = math.sqrt(p_mag**2 + PION**2)
    assert by_rank(info, "pfcand_btagEtaRel")[0] == pytest.approx(0.5 * math.log((e_pion + along) / (e_pion - along)))
    assert by_rank(info, "pfcand_btagPParRatio")[0] == pytest.approx(along / p_mag)
    assert by_rank(info, "pfcand_btagPtRatio")[0] == pytest.approx(math.sqrt(p_mag**2 - along**2) / p_mag)
    # the reference point (-dxy sinφ, dxy cosφ) lies at φ(track) + 90°, 5° from the jet's side: the IP is negative
    sign = math.copysign(1.0, math.cos(pi["phi"] + math.pi / 2 - JET["phi"]))
    assert sign < 0
    assert by_rank(info, "pfcand_btagSip2dVal")[0] == pytest.approx(sign * 0.01)
    assert by_rank(info, "pfcand_btagSip2dSig")[0] == pytest.approx(sign * 5.0)
    for name in ("pfcand_btagEtaRel", "pfcand_btagSip3dVal", "pfcand_btagJetDistVal"):
        assert by_rank(info, name)[1:3] == [0.0, 0.0], name  # γ and neutral hadron: no track
    # ΔR to the nearest SV of the event (all SVs count, CMS's mindrsvpfcand)
    nearest = min(math.hypot(pi["eta"] - s["eta"], wrap(pi["phi"] - s["phi"])) for s in SVS)
    assert by_rank(info, "pfcand_drminsv")[0] == pytest.approx(nearest)
    assert by_rank(info, "pfcand_drsubjet1") == [-1.0] * 4  # no subjets


def test_puppi_candidate_features_follow_cms():
    """AK8 PUPPI settings: the π- (weight 0.005) is dropped, the order follows weighted pT (γ 30 > π+ 20), and
    the weighted momentum enters pt_log and ptrel, never the *_nopuppi ones."""
    info = make_info(TagInfoSettings(jet_radius=0.8, min_puppi_weight=0.01, use_puppi_p4=True))
    assert info.entries("pfcand_pt_log").counts.tolist() == [3]
    assert by_rank(info, "pfcand_pt_log_nopuppi") == pytest.approx([math.log(30), math.log(40), math.log(12)])
    assert by_rank(info, "pfcand_pt_log") == pytest.approx([math.log(30), math.log(20), math.log(12)])
    assert by_rank(info, "pfcand_ptrel") == pytest.approx([0.30, 0.20, 0.12])
    assert by_rank(info, "pfcand_puppiw") == pytest.approx([1.0, 0.5, 1.0])


def test_secondary_vertex_features_follow_cms():
    """SVs within the jet radius, by decreasing dxy significance; the from-MiniAOD jet_sv_* take SV − jet for η
    and an unwrapped φ difference, and sign dxy and d3d by the jet direction."""
    info = make_info(TagInfoSettings(jet_radius=0.4))
    first, second = SVS[1], SVS[0]  # dxySig 12 before 5; the third is outside
    assert by_rank(info, "sv_dxysig") == [12.0, 5.0]
    assert by_rank(info, "sv_etarel") == pytest.approx([first["eta"] - 0.5, second["eta"] - 0.5])
    assert by_rank(info, "sv_pt_log") == pytest.approx([math.log(8.0), math.log(10.0)])
    assert by_rank(info, "sv_costhetasvpv") == pytest.approx([math.cos(0.02), math.cos(0.05)])
    assert by_rank(info, "jet_sv_dphi") == pytest.approx([first["phi"] - 0.2, second["phi"] - 0.2])
    assert by_rank(info, "jet_sv_deta") == pytest.approx([first["eta"] - 0.5, second["eta"] - 0.5])
    # the first SV sits behind the PV (x < 0 against a jet at φ = 0.2): negative signed distances
    assert by_rank(info, "jet_sv_dxy") == pytest.approx([-0.5, 0.3])
    assert by_rank(info, "jet_sv_d3d") == pytest.approx([-0.6, 0.4])
    assert by_rank(info, "sv_mask") == [1.0, 1.0]


def test_from_miniaod_candidate_and_lost_track_features_follow_cms():
    info = make_info(TagInfoSettings(jet_radius=0.4, lost_track_max_dr=0.4, lost_track_min_pt=1.0))
    pi, gamma, soft, nh = CANDS
    assert by_rank(info, "jet_pfcand_deta") == pytest.approx([0.5 - c["eta"] for c in (pi, gamma, nh, soft)])
    assert by_rank(info, "jet_pfcand_dphi") == pytest.approx([0.2 - c["phi"] for c in (pi, gamma, nh, soft)])
    assert by_rank(info, "jet_pfcand_id") == [4, 2, 3, 4]  # charged hadron, photon, neutral hadron
    assert by_rank(info, "jet_pfcand_dxysig") == pytest.approx([5.0, 0.0, 0.0, 2.0])  # |dxy| / σ
    assert by_rank(info, "jet_pfcand_track_chi2") == pytest.approx([1.7, 0.0, 0.0, 1.7])  # not floored
    u, p = unit_jet(), momentum(pi)
    p_mag = math.sqrt(sum(x * x for x in p))
    cos = sum(a * b for a, b in zip(u, p)) / p_mag
    assert by_rank(info, "jet_pfcand_ppara_ratio")[0] == pytest.approx(cos)
    assert by_rank(info, "jet_pfcand_pperp_ratio")[0] == pytest.approx(math.sqrt(1 - cos**2) / p_mag)  # sinθ / |p|
    # lost tracks: only the 3 GeV one is within 0.4 and above 1 GeV
    lost = LOST[0]
    assert info.entries("jet_losttrack_pt_log").counts.tolist() == [1]
    assert by_rank(info, "jet_losttrack_pt_log") == pytest.approx([math.log(3.0)])
    assert by_rank(info, "jet_losttrack_deta") == pytest.approx([0.5 - lost["eta"]])
    assert by_rank(info, "jet_losttrack_dphi") == pytest.approx([wrap(0.2 - lost["phi"])])
    assert by_rank(info, "jet_losttrack_dzsig") == pytest.approx([0.01 / 0.004])
    assert by_rank(info, "jet_losttrack_nstriphits") == [10.0] and by_rank(info, "lt_mask") == [1.0]


@pytest.mark.parametrize("settings", [dict(min_jet_pt=150.0), dict(min_jet_eta=2.5), dict(max_jet_eta=0.4)])
def test_jets_outside_the_selection_have_no_entries(settings):
    info = make_info(TagInfoSettings(jet_radius=0.4, **settings))
    for name in ("pfcand_etarel", "sv_etarel", "jet_losttrack_eta"):
        assert info.entries(name).counts.tolist() == [0], name
    inside = make_info(TagInfoSettings(jet_radius=0.4, min_jet_pt=50.0, min_jet_eta=0.4, max_jet_eta=2.5))
    assert inside.entries("pfcand_etarel").counts.tolist() == [4]


def write_preprocess(path: Path) -> Path:
    """A preprocess.json exercising every rule: bounds, inf replacement, a pad value, a fixed var_length."""
    var = lambda median=0.0, norm=1.0, lo=-1e32, hi=1e32, pad=0.0: {  # noqa: E731
        "median": median, "norm_factor": norm, "replace_inf_value": -3.0, "lower_bound": lo, "upper_bound": hi,
        "pad": pad}
    spec = {"output_names": ["label_a", "label_b"], "input_names": ["sv_x", "pf_x"],
            "pf_x": {"var_names": ["pfcand_pt_log_nopuppi", "pfcand_drminsv", "pfcand_mask"],
                     "var_infos": {"pfcand_pt_log_nopuppi": var(1.0, 0.5, -1.0, 1.0, pad=-1.0),
                                   "pfcand_drminsv": var(), "pfcand_mask": var()},
                     "min_length": 2, "max_length": 3},
            "sv_x": {"var_names": ["sv_mass"], "var_infos": {"sv_mass": var(1.0, 2.0)}, "var_length": 4}}
    path.write_text(json.dumps(spec))
    return path


def test_inputs_are_built_as_preprocess_json_says(tmp_path):
    spec = load_preprocess(write_preprocess(tmp_path / "preprocess.json"))
    svs_far = [dict(s, eta=3.0) for s in SVS]  # no SV anywhere near: ΔR to the nearest is finite but none in jet
    info = TagInfo(TagInfoSettings(jet_radius=0.4), table([JET, dict(JET, pt=20.0, eta=-2.0)]), table(CANDS),
                   {"jetIdx": np.zeros(4, int), "pFCandsIdx": np.arange(4)}, table(svs_far), None)
    info_no_sv = TagInfo(TagInfoSettings(jet_radius=0.4), table([JET]), table(CANDS),
                         {"jetIdx": np.zeros(4, int), "pFCandsIdx": np.arange(4)},
                         {k: np.zeros(0) for k in SVS[0]}, None)
    x = build_inputs(spec, info.n_jets, info.entries, info.feature)
    assert list(x) == ["sv_x", "pf_x"]  # the file's order
    assert x["pf_x"].shape == (2, 3, 3) and x["sv_x"].shape == (2, 1, 4)  # 4 candidates truncated to 3; var_length
    # log pT 40, 30, 12 → clip((log pt - 1) * 0.5, -1, 1); the second jet has no candidates: pad values
    assert x["pf_x"][0, 0].tolist() == pytest.approx([min((math.log(pt) - 1) * 0.5, 1.0) for pt in (40, 30, 12)])
    assert x["pf_x"][1, 0].tolist() == [-1.0, -1.0, -1.0] and x["pf_x"][1, 2].tolist() == [0.0, 0.0, 0.0]
    assert x["sv_x"].tolist() == [[[0.0] * 4]] * 2  # no SV in either jet: padding
    # no SV in the event: ΔR to the nearest is infinite → replace_inf_value
    y = build_inputs(spec, 1, info_no_sv.entries, info_no_sv.feature)
    assert y["pf_x"][0, 1].tolist() == [-3.0, -3.0, -3.0]


@pytest.mark.parametrize("change, message", [
    (lambda s: s.pop("input_names"), r"input_names: missing"),
    (lambda s: s["pf_x"].pop("min_length"), r"pf_x: needs min_length and max_length"),
    (lambda s: s["pf_x"]["var_infos"].pop("pfcand_mask"), r"pf_x.var_infos.pfcand_mask: missing"),
    (lambda s: s["sv_x"].update(var_names="sv_mass"), r"sv_x.var_names: missing or not a list"),
])
def test_bad_preprocess_json_is_one_line_naming_the_entry(tmp_path, change, message):
    path = write_preprocess(tmp_path / "preprocess.json")
    spec = json.loads(path.read_text())
    change(spec)
    path.write_text(json.dumps(spec))
    with pytest.raises(ConfigError, match=message) as info:
        load_preprocess(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.shared
@pytest.mark.parametrize("model, pf_features, lengths", [("particlenet_AK4", 20, (8, 50)),
                                                         ("particlenet", 25, (16, 100))])
def test_cms_preprocess_parity(model, pf_features, lengths):
    """CMS's own preprocess.json: inputs in its order and shapes, lengths clamped to its bounds, values as its
    median/norm/bounds say for a hand-built jet, and CMS's model runs on them."""
    import onnxruntime as ort

    folder = shared_path("real", "cms-models", model)
    raw = json.loads((folder / "preprocess.json").read_text())
    spec = load_preprocess(folder / "preprocess.json")
    rng = np.random.default_rng(5)
    many = [track(float(pt), 0.5 + float(d), 0.2 + float(f), 1, 211, dxy=0.001) for pt, d, f in
            zip(rng.uniform(1, 50, 130), rng.normal(0, 0.1, 130), rng.normal(0, 0.1, 130))]
    jets = table([JET, dict(JET, phi=2.5)])
    for n_cands in (3, 130):  # below the minimum and above the maximum length
        cands = many[:n_cands]
        info = TagInfo(TagInfoSettings(jet_radius=0.8), jets, table(cands),
                       {"jetIdx": np.zeros(n_cands, int), "pFCandsIdx": np.arange(n_cands)}, table(SVS[:1]), None)
        x = build_inputs(spec, info.n_jets, info.entries, info.feature)
        assert list(x) == raw["input_names"]
        length = min(max(n_cands, lengths[0]), lengths[1])
        for name in raw["input_names"]:
            n_vars = len(raw[name]["var_names"])
            assert x[name].shape == (2, n_vars, length if name.startswith("pf") else 1), name
        assert x["pf_features"].shape[1] == pf_features
        assert x["pf_mask"][0, 0].sum() == min(n_cands, lengths[1]) and x["pf_mask"][1].sum() == 0
        assert x["sv_mask"][:, 0, 0].tolist() == [1.0, 0.0]  # the SV is in the first jet only
        # the hardest candidate, by hand with the file's numbers
        hardest = max(cands, key=lambda c: c["pt"])
        names = raw["pf_features"]["var_names"]
        for var, value in (("pfcand_pt_log_nopuppi", math.log(hardest["pt"])), ("pfcand_abseta", abs(hardest["eta"])),
                           ("pfcand_dxysig", 0.5), ("pfcand_charge", 1.0), ("pfcand_etarel", hardest["eta"] - 0.5)):
            v = raw["pf_features"]["var_infos"][var]
            expected = min(max((value - v["median"]) * v["norm_factor"], v["lower_bound"]), v["upper_bound"])
            assert x["pf_features"][0, names.index(var), 0] == pytest.approx(expected, rel=1e-5, abs=1e-6), var
        session = ort.InferenceSession(str(folder / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
        scores = session.run(None, x)[0]
        assert scores.shape == (2, len(raw["output_names"])) and np.allclose(scores.sum(axis=1), 1, atol=1e-4)


def test_discriminators_are_cms_ratios():
    probs = np.array([[0.5, 0.1, 0.2, 0.2], [0.0, 0.0, 0.0, 1.0], [0.3, 0.3, 0.4, 0.0]], np.float32)
    classes = ["Tbcq", "Tbqq", "QCD", "pu"]
    tvsqcd, top = make_discriminators({"TvsQCD": {"numerator": ["Tbcq", "Tbqq"],
                                                  "denominator": ["Tbcq", "Tbqq", "QCD"]},
                                       "Top": {"numerator": ["Tbcq", "Tbqq"]}}, classes, "m", "k")
    assert tvsqcd(probs).tolist() == pytest.approx([0.6 / 0.8, UNDEFINED, 0.6])  # 0 / 0 → CMS's -10
    assert top(probs).tolist() == pytest.approx([0.6, 0.0, 0.6])  # no denominator: the sum
    assert Discriminator("x", (0,), ())(probs).dtype == np.float32
    with pytest.raises(ConfigError, match=r"discriminator 'BvsAll' uses \['b'\], which are not classes of model 'm'"):
        make_discriminators({"BvsAll": {"numerator": ["b"]}}, classes, "m", "k")


#: CMS's definitions (pfParticleNetDiscriminatorsJetTags, pfParticleNetAK4DiscriminatorsJetTags)
QCD = ["probQCDbb", "probQCDcc", "probQCDb", "probQCDc", "probQCDothers"]
CMS_DEFINITIONS = {
    "pnetAK8": {"TvsQCD": (["probTbcq", "probTbqq"], ["probTbcq", "probTbqq", *QCD]),
                "WvsQCD": (["probWcq", "probWqq"], ["probWcq", "probWqq", *QCD]),
                "ZvsQCD": (["probZbb", "probZcc", "probZqq"], ["probZbb", "probZcc", "probZqq", *QCD]),
                "HbbvsQCD": (["probHbb"], ["probHbb", *QCD])},
    "pnetAK4": {"BvsAll": (["b", "bb"], ["b", "bb", "c", "cc", "uds", "g"]),
                "CvsL": (["c", "cc"], ["c", "cc", "uds", "g"]), "CvsB": (["c", "cc"], ["c", "cc", "b", "bb"]),
                "QvsG": (["uds"], ["uds", "g"])},
}


def test_shipped_configurations_use_cms_definitions():
    cms = yaml.safe_load((PROJECT / "configs" / "miniaod_cms.yaml").read_text())["modules"]
    for label, definitions in CMS_DEFINITIONS.items():
        shipped = cms[label]["discriminators"]
        for name, (numerator, denominator) in definitions.items():
            assert shipped[name]["numerator"] == numerator and shipped[name]["denominator"] == denominator, name
    own = yaml.safe_load((PROJECT / "configs" / "miniaod.yaml").read_text())["modules"]
    assert own["pnetAK8"]["discriminators"]["TvsQCD"] == {"numerator": ["Top"], "denominator": ["Top", "QCD"]}
    assert own["pnetAK4"]["discriminators"]["BvsAll"] == {"numerator": ["b"], "denominator": ["b", "c", "uds", "g"]}


TAGGERS = ["pnetAK4:scores as JetPNet", "pnetAK8:scores as FatJetPNet"]


@pytest.mark.triton
def test_every_configured_tagger_direct_equals_sonic(small_file, tmp_path, monkeypatch):
    """The ParticleNet taggers of every shipped configuration, direct and on one Triton server serving the
    project's models and (where ../shared exists) CMS's: the same columns and scores within 1e-5."""
    project = PROJECT / "data" / "models" / "miniaod"
    repositories, models = [str(project)], ["miniaod_particlenet_ak4", "miniaod_particlenet_ak8"]
    configs = ["miniaod"]
    try:
        cms = shared_path("real", "cms-models", "particlenet_AK4").parent
        monkeypatch.setenv("SONIC_HEP_CMS_MODELS", str(cms))
        repositories.append(str(cms))
        models += ["particlenet_AK4", "particlenet"]
        configs.append("miniaod_cms")
    except pytest.skip.Exception:
        pass
    with TritonServer(repositories, models=models, workdir=tmp_path / "server") as server:
        for name in configs:
            out = {}
            for mode in ("direct", "sonic"):
                path = tmp_path / f"{name}-{mode}.root"
                config = cfgmod.load(name, [
                    f"source.files=['{small_file}']", f"output.file='{path}'", "options.progress=false",
                    "source.max_events=12", f"output.products={TAGGERS}", f"services.inference.mode={mode}",
                    f"services.inference.servers=['{server.grpc_url}']", "services.inference.fallback=false"])
                Process(config).run(progress=False)
                out[mode] = branches(path)
            assert out["direct"].keys() == out["sonic"].keys()
            assert {"JetPNet_BvsAll", "FatJetPNet_TvsQCD", "FatJetPNet_WvsQCD"} <= out["direct"].keys()
            assert out["direct"]["JetPNet_BvsAll"].size > 50
            for column, values in out["direct"].items():
                np.testing.assert_allclose(out["sonic"][column], values, rtol=0, atol=1e-5, err_msg=f"{name} {column}")


#: a from-MiniAOD-style version (CMS's ParticleNetFromMiniAOD layout, a subset of its variables): nine inputs,
#: lost tracks included
FROM_MINIAOD = {
    "pf": ("jet_pfcand_deta", "jet_pfcand_dphi", ["jet_pfcand_pt_log", "jet_pfcand_id", "jet_pfcand_dxysig",
                                                  "jet_pfcand_trackjet_d3dsig", "jet_pfcand_frompv"], "pfcand_mask"),
    "sv": ("jet_sv_deta", "jet_sv_dphi", ["jet_sv_pt_log", "jet_sv_dxy", "jet_sv_d3dsig"], "sv_mask"),
    "lt": ("jet_losttrack_deta", "jet_losttrack_dphi", ["jet_losttrack_pt_log", "jet_losttrack_dzsig",
                                                        "jet_losttrack_trackjet_decayL", "jet_losttrack_nstriphits"],
           "lt_mask"),
}


def write_from_miniaod_model(repository: Path) -> Path:
    """A tiny ONNX model with the from-MiniAOD inputs (one score per group: the sum of its masked features and
    points) and its preprocess.json, in a Triton repository folder — as CMS ships a tagger version."""
    from onnx import TensorProto, helper

    from sonic_hep.framework.inference.repository import TensorSpec, write_model

    nodes, inputs, specs, sums = [], [], [], []
    var = lambda: {"median": 0.0, "norm_factor": 0.5, "replace_inf_value": 0, "lower_bound": -5,  # noqa: E731
                   "upper_bound": 5, "pad": 0}
    spec = {"output_names": ["label_b", "label_c", "label_uds"], "input_names": []}
    for group, (deta, dphi, features, mask) in FROM_MINIAOD.items():
        for suffix, names, n_min, n_max in (("points", [deta, dphi], 1, 25), ("features", features, 1, 25),
                                            ("mask", [mask], 1, 25)):
            name = f"{group}_{suffix}"
            spec["input_names"].append(name)
            spec[name] = {"var_names": names, "var_infos": {n: var() for n in names}, "min_length": n_min,
                          "max_length": n_max}
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", len(names), "L"]))
            specs.append(TensorSpec(name, "FP32", (len(names), -1)))
        nodes += [helper.make_node("Mul", [f"{group}_features", f"{group}_mask"], [f"{group}_masked"]),
                  helper.make_node("ReduceSum", [f"{group}_masked", "axes"], [f"{group}_sum"], keepdims=0),
                  helper.make_node("ReduceSum", [f"{group}_points", "axes"], [f"{group}_psum"], keepdims=0),
                  helper.make_node("Add", [f"{group}_sum", f"{group}_psum"], [f"{group}_logit"]),
                  helper.make_node("Unsqueeze", [f"{group}_logit", "one"], [f"{group}_col"])]
        sums.append(f"{group}_col")
    nodes += [helper.make_node("Concat", sums, ["scores"], axis=1)]
    graph = helper.make_graph(nodes, "from_miniaod_toy", inputs,
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor("axes", TensorProto.INT64, [2], [1, 2]),
                               helper.make_tensor("one", TensorProto.INT64, [1], [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    folder = write_model(repository, "pnet_from_miniaod_toy", model.SerializeToString(),
                         specs, [TensorSpec("scores", "FP32", (3,))], max_batch_size=100)
    (folder / "preprocess.json").write_text(json.dumps(spec))
    return folder


def test_a_from_miniaod_version_with_lost_tracks_plugs_in_by_configuration(small_file, tmp_path):
    """A model folder + its preprocess.json (nine inputs, lost tracks among them) runs with a configuration
    only: one score per output name, each the model's function of the inputs the preprocess.json defines."""
    repository = tmp_path / "models"
    write_from_miniaod_model(repository)
    path = tmp_path / "out.root"
    config = cfgmod.load("miniaod", [
        f"source.files=['{small_file}']", f"output.file='{path}'", "options.progress=false", "source.max_events=6",
        "modules.pnetAK4={type: BoostedJetTags, model: pnet_from_miniaod_toy, jets: Jet, constituents: JetPFCands, "
        "jet_radius: 0.4, discriminators: {BvsAll: {numerator: [b], denominator: [b, c, uds]}}}",
        "output.products=['pnetAK4:scores as JetToy']", f"services.inference.repository=['{repository}']"])
    Process(config).run(progress=False)
    out = branches(path)
    assert {"JetToy_b", "JetToy_c", "JetToy_uds", "JetToy_BvsAll"} <= out.keys()
    total = out["JetToy_b"] + out["JetToy_c"] + out["JetToy_uds"]
    ratio = np.where(total != 0, out["JetToy_b"] / np.where(total != 0, total, 1), -10)
    np.testing.assert_allclose(out["JetToy_BvsAll"], ratio, rtol=1e-4, atol=1e-5)
    # the third score sums the lost-track inputs: non-zero exactly for jets with a lost track above 1 GeV
    # within ΔR 0.4 (counted here from the file)
    events = uproot.open(small_file)["Events"].arrays(["Jet_eta", "Jet_phi", "LostTracks_pt", "LostTracks_eta",
                                                       "LostTracks_phi"], entry_stop=6)
    has_lost = []
    for e in events:
        for eta, phi in zip(e.Jet_eta, e.Jet_phi):
            dphi = (np.asarray(e.LostTracks_phi) - phi + np.pi) % (2 * np.pi) - np.pi
            dr = np.hypot(np.asarray(e.LostTracks_eta) - eta, dphi)
            has_lost.append(bool(np.any((dr < 0.4) & (np.asarray(e.LostTracks_pt) > 1.0))))
    has_lost = np.array(has_lost)
    assert out["JetToy_uds"].size == has_lost.size and 0 < has_lost.sum() < has_lost.size
    assert np.all((out["JetToy_uds"] != 0) == has_lost)


def test_a_model_reading_lost_tracks_without_them_is_one_error_naming_the_collection(small_file, tmp_path):
    repository = tmp_path / "models"
    write_from_miniaod_model(repository)
    config = cfgmod.load("miniaod", [
        f"source.files=['{small_file}']", f"output.file='{tmp_path / 'out.root'}'", "options.progress=false",
        "source.max_events=2", "modules.pnetAK4={type: BoostedJetTags, model: pnet_from_miniaod_toy, jets: Jet, "
        "constituents: JetPFCands, lost_tracks: NoLostTracks}", "output.products=['pnetAK4:scores as JetToy']",
        f"services.inference.repository=['{repository}']"])
    with pytest.raises(SonicError, match=r"module 'pnetAK4'.*reads lost-track features.*no 'NoLostTracks' collection"):
        Process(config).run(progress=False)
    assert not (tmp_path / "out.root").exists()


def test_particlenet_tagger_is_the_same_tagger_configured_by_one_word(small_file, tmp_path):
    """``type: ParticleNetTagger`` with ``preprocess: ak4|ak8`` (configurations written before BoostedJetTags)
    gives the shipped BoostedJetTags configuration's scores; its ``discriminants`` are numerator-only sums."""
    out = {}
    for name, modules in (("boosted", []), ("legacy", [
            "modules.pnetAK4={type: ParticleNetTagger, preprocess: ak4, jets: Jet, constituents: JetPFCands, "
            "model: miniaod_particlenet_ak4, discriminants: {bc: [b, c]}}",
            "modules.pnetAK8={type: ParticleNetTagger, preprocess: ak8, jets: FatJet, constituents: FatJetPFCands, "
            "model: miniaod_particlenet_ak8}"])):
        path = tmp_path / f"{name}.root"
        config = cfgmod.load("miniaod", [f"source.files=['{small_file}']", f"output.file='{path}'",
                                         "options.progress=false", "source.max_events=8",
                                         f"output.products={TAGGERS}", *modules])
        Process(config).run(progress=False)
        out[name] = branches(path)
    for column in ("JetPNet_b", "JetPNet_pu", "FatJetPNet_Top", "FatJetPNet_QCD"):
        assert out["legacy"][column].size > 0
        np.testing.assert_array_equal(out["legacy"][column], out["boosted"][column], err_msg=column)
    np.testing.assert_allclose(out["legacy"]["JetPNet_bc"], out["boosted"]["JetPNet_b"] + out["boosted"]["JetPNet_c"],
                               rtol=1e-6)
