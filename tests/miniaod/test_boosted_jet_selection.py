"""BoostedJetTags as CMS runs a tagger version: jets its tag-info producer leaves empty get 0 for every output
and are never sent to the model; every form CMS's preprocess.json files use is read; a preprocess.json and
its model are checked against each other when the job starts.

What CMS writes comes from CMSSW's sources: ``DeepBoostedJetTagInfoProducer`` and
``ParticleNetFeatureEvaluator`` fill no features for a jet with ``pt < min_jet_pt`` (the evaluator: corrected
and raw pT both below), ``|eta| > max_jet_eta``, ``|eta| < min_jet_eta`` (the evaluator) or no daughters;
``DeepBoostedJetFeatures::empty()`` is true for a jet nothing was filled for; ``BoostedJetONNXJetTagsProducer``
then skips the model and ``ParticleNetSonicJetTagsProducer`` writes 0 for every output;
``BTagProbabilityToDiscriminator`` makes 0 / 0 its -10.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import uproot

from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.errors import ConfigError, SonicError
from sonic_hep.framework.inference.direct import DirectClient
from sonic_hep.framework.inference.repository import ModelRepository, TensorSpec
from sonic_hep.framework.process import Process
from sonic_hep.framework.testing import run_module
from sonic_hep.modules.miniaod.boosted_jet_tags import BoostedJetTags
from sonic_hep.modules.miniaod.discriminators import UNDEFINED
from sonic_hep.modules.miniaod.particlenet_inputs import AK4, AK8
from sonic_hep.modules.miniaod.preprocess import load_preprocess, model_mismatch

from tests.conftest import SHARED, shared_path
from tests.miniaod.conftest import branches
from tests.miniaod.test_boosted_jet_tags import track, write_from_miniaod_model, write_preprocess

PROJECT = Path(__file__).resolve().parents[2]
OWN = PROJECT / "data" / "models" / "miniaod"
SV = dict(pt=10.0, mass=1.5, ntracks=3, chi2=0.9, dxy=0.3, dxySig=5.0, dlen=0.4, dlenSig=7.0, x=0.29, y=0.07, z=0.25,
          pAngle=0.05)


class Recording:
    """A real inference client that also keeps how many jets each request carried."""

    def __init__(self, client):
        self.client, self.rows = client, []

    def model_info(self, model: str):
        return self.client.model_info(model)

    def infer(self, model, inputs, outputs=None):
        self.rows.append(len(next(iter(inputs.values()))))
        return self.client.infer(model, inputs, outputs)


def jet_event(pt: float, eta: float, cands: int = 3, puppi: float = 1.0, sv: bool = True,
              raw_factor: float = 0.0) -> dict:
    """One event holding one jet: ``cands`` constituents around its axis (a π+, a photon, a neutral hadron)
    with PUPPI weight ``puppi``, an SV on its axis, one far lost track."""
    phi = 0.3
    cands_ = [track(0.3 * pt, eta + 0.05, phi + 0.05, 1, 211, dxy=0.01, dz=0.02, puppi=puppi),
              track(0.2 * pt, eta - 0.05, phi, 0, 22, puppi=puppi),
              track(0.1 * pt, eta, phi - 0.05, 0, 130, puppi=puppi, hcalFraction=0.9)][:cands]
    return {"Jet": [{"pt": pt, "eta": eta, "phi": phi, "mass": 0.1 * pt}],
            "JetPFCands": [{"jetIdx": 0, "pFCandsIdx": i} for i in range(len(cands_))],
            "PFCands": cands_ or [track(1.0, -eta, -phi, 1, 211)],  # never an empty collection: fields kept
            "SV": [dict(SV, eta=eta + 0.01, phi=phi + 0.01)] if sv else [dict(SV, eta=-eta, phi=-2.8)],
            "LostTracks": [track(2.0, -eta, -2.5, 1, 211)],
            "Jet_rawFactor": [raw_factor]}


def columns(events: list[dict]) -> dict[str, ak.Array]:
    return {key: ak.Array([e[key] for e in events]) for key in events[0]}


#: each jet: (pt in units of the pT cut, eta, extra, scored by CMS) for the two jet selections
CENTRAL = [(1.0, 0.3, {}, True),  # at the cut: CMS drops pt < min_jet_pt only
           (0.97, 0.3, {}, False), (2.0, 2.45, {}, True), (2.0, -2.55, {}, False),
           (2.0, 0.3, {"cands": 0}, False),  # no constituent (an SV on its axis): no daughters, not filled
           (2.0, 0.3, {"puppi": 0.005, "sv": False}, "chs")]  # PUPPI drops every constituent: nothing left
FORWARD = [(2.0, 3.0, {}, True), (2.0, 2.4, {}, False), (2.0, -4.6, {}, True), (2.0, 4.8, {}, False),
           (0.97, 3.0, {}, False), (1.0, -3.0, {}, True)]
SELECTIONS = {"central": (CENTRAL, {"max_jet_eta": 2.5}),
              "forward": (FORWARD, {"min_jet_eta": 2.5, "max_jet_eta": 4.7})}
#: the tag-info settings of each jet type, its pT cut (CMS's: AK4 15 GeV, AK8 150 GeV)
JET_TYPES = {"chs": ({"jet_radius": 0.4}, 15.0), "puppi": (AK8.parameters, 150.0)}

#: every shipped version: the project's models, and CMS's the tests can reach
VERSIONS = [pytest.param("miniaod_particlenet_ak4", (), "chs", id="ak4"),
            pytest.param("miniaod_particlenet_ak8", (), "puppi", id="ak8"),
            pytest.param("particlenet_AK4", ("real", "cms-models"), "chs", marks=pytest.mark.shared,
                         id="cms_ak4"),
            pytest.param("particlenet", ("real", "cms-models"), "puppi", marks=pytest.mark.shared, id="cms_ak8"),
            pytest.param("particlenet_AK4_PT", ("real", "cms-models-torchscript"), "chs", marks=pytest.mark.shared,
                         id="cms_ak4_torchscript")]


def tag(model: str, repository: Path, events: list[dict], **params):
    """BoostedJetTags over ``events`` (one call), on a recording direct client; (per-jet records, rows sent)."""
    client = Recording(DirectClient(ModelRepository([repository])))
    try:
        run = run_module(BoostedJetTags, columns(events), label="tagger", inference=client, model=model, jets="Jet",
                         constituents="JetPFCands", **params)
    finally:
        client.client.close()
    return ak.flatten(run.stacked("scores")), client.rows


@pytest.mark.parametrize("selection", list(SELECTIONS))
@pytest.mark.parametrize("model, folder, jet_type", VERSIONS)
def test_jets_outside_the_selection_get_cms_zeros_and_are_not_sent(model, folder, jet_type, selection):
    """Jets on both sides of every cut: those CMS leaves empty get 0 for every output (-10 for a discriminator
    with a denominator, 0 for one without) and no row of any request; the others get the model's scores — the
    same as when the empty ones are not in the events at all."""
    if model.endswith("_PT"):
        pytest.importorskip("torch")
    repository = shared_path(*folder, model).parent if folder else OWN
    settings, cut = JET_TYPES[jet_type]
    jets, window = SELECTIONS[selection]
    events = [jet_event(scale * cut, eta, **extra) for scale, eta, extra, _ in jets]
    scored = np.array([expected is True or expected == jet_type for *_, expected in jets])
    assert scored.any() and not scored.all()
    labels = load_labels(repository / model)
    params = dict(settings, min_jet_pt=cut, **window, discriminators={
        "sum": {"numerator": labels[:1]}, "ratio": {"numerator": labels[:1], "denominator": labels[:2]}})
    scores, rows = tag(model, repository, events, **params)
    assert sum(rows) == scored.sum()  # only the jets CMS fills were sent
    outputs = np.stack([scores[name].to_numpy() for name in labels], axis=1)
    assert (outputs[~scored] == 0).all()
    assert (scores["sum"].to_numpy()[~scored] == 0).all() and (scores["ratio"].to_numpy()[~scored] == UNDEFINED).all()
    np.testing.assert_allclose(outputs[scored].sum(axis=1), 1, atol=1e-4)  # the model's softmax
    alone, _ = tag(model, repository, [e for e, keep in zip(events, scored) if keep], **params)
    np.testing.assert_allclose(np.stack([alone[name].to_numpy() for name in labels], axis=1), outputs[scored],
                               rtol=0, atol=1e-6)


def load_labels(folder: Path) -> list[str]:
    """The model's class names, from its labels file."""
    return next(folder.glob("*labels*.txt")).read_text().split()


def test_the_from_miniaod_selection_passes_a_jet_by_corrected_or_raw_pt(tmp_path):
    """ParticleNetFeatureEvaluator keeps a jet whose corrected or raw pT (NanoAOD: pt·(1 − rawFactor)) reaches
    min_jet_pt; DeepBoostedJetTagInfoProducer (the pfcand_* versions) looks at the corrected pT only."""
    write_from_miniaod_model(tmp_path / "models")
    events = [jet_event(14.0, 0.3, raw_factor=-0.1),  # corrected 14, raw 15.4
              jet_event(14.0, 0.3, raw_factor=0.05),  # both below
              jet_event(16.0, 0.3, raw_factor=0.2)]  # corrected 16, raw 12.8
    for model, repository, raw, expected in (
            ("pnet_from_miniaod_toy", tmp_path / "models", "Jet_rawFactor", [True, False, True]),
            ("pnet_from_miniaod_toy", tmp_path / "models", "", [False, False, True]),
            ("miniaod_particlenet_ak4", OWN, "Jet_rawFactor", [False, False, True])):
        scores, rows = tag(model, repository, events, jet_radius=0.4, min_jet_pt=15.0, raw_factor=raw,
                           lost_tracks="LostTracks")
        first = scores[scores.fields[0]].to_numpy()
        assert (first != 0).tolist() == expected and sum(rows) == sum(expected), (model, raw)


def test_a_raw_factor_branch_of_another_collection_is_one_error(tmp_path):
    events = [jet_event(20.0, 0.3)]
    events[0]["Jet_rawFactor"] = [0.1, 0.2]  # two values for one jet
    with pytest.raises(SonicError, match=r"'Jet_rawFactor' has 2 values for 1 jets of 'Jet'"):
        tag("miniaod_particlenet_ak4", OWN, events, raw_factor="Jet_rawFactor")


# -- the forms of CMS's preprocess.json files --------------------------------------------------------------------
def test_every_form_of_cms_preprocess_files_is_read(tmp_path):
    """The forms CMS's files use: output_names as a list, as a mapping from name to the training's definition
    (the regression versions), or absent with the older files' flav_names; var_length instead of
    min/max_length; integer numbers; pad left out; an input_shape CMSSW ignores."""
    base = json.loads(write_preprocess(tmp_path / "base.json").read_text())
    forms = {
        "list": (lambda s: None, ("label_a", "label_b")),
        "mapping": (lambda s: s.update(output_names={"target_mass": "np.maximum(1, fj_gen_mass)"}), ("target_mass",)),
        "flav_names": (lambda s: (s.pop("output_names"), s.update(flav_names=["probQCD", "probTop"])),
                       ("probQCD", "probTop")),
        "none": (lambda s: s.pop("output_names"), ()),
    }
    for name, (change, outputs) in forms.items():
        spec = json.loads(json.dumps(base))
        change(spec)
        group = spec["pf_x"]
        group.update(input_shape=[1, 3, 3], min_length=2, max_length=3)
        info = group["var_infos"]["pfcand_mask"]
        info.pop("pad")
        info.update(median=0, norm_factor=1, lower_bound=-5, upper_bound=5)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(spec))
        parsed = load_preprocess(path)
        assert parsed.output_names == outputs, name
        pf = next(g for g in parsed.inputs if g.name == "pf_x")
        assert (pf.min_length, pf.max_length) == (2, 3) and pf.infos[2].pad == 0.0 and pf.infos[2].upper_bound == 5
        sv = next(g for g in parsed.inputs if g.name == "sv_x")
        assert (sv.min_length, sv.max_length) == (4, 4)  # var_length
    spec = json.loads(json.dumps(base))
    spec["output_names"] = 3
    (tmp_path / "bad.json").write_text(json.dumps(spec))
    with pytest.raises(ConfigError, match=r"output_names: neither a list of names nor a mapping") as err:
        load_preprocess(tmp_path / "bad.json")
    assert "\n" not in str(err.value)


def test_output_names_as_a_mapping_name_the_scores(small_file, tmp_path):
    """A model without a labels file whose preprocess.json gives output_names as a mapping (as CMS's Run 3
    scouting mass regression does): the job runs by configuration alone and the scores take the mapping's
    names."""
    folder = write_from_miniaod_model(tmp_path / "models")
    spec = json.loads((folder / "preprocess.json").read_text())
    spec["output_names"] = {"label_b": "isB", "label_c": "isC", "target_x": "gen_x / x"}
    (folder / "preprocess.json").write_text(json.dumps(spec))
    path = tmp_path / "out.root"
    config = cfgmod.load("miniaod", [
        f"source.files=['{small_file}']", f"output.file='{path}'", "options.progress=false", "source.max_events=3",
        "modules.pnetAK4={type: BoostedJetTags, model: pnet_from_miniaod_toy, jets: Jet, constituents: JetPFCands, "
        "jet_radius: 0.4}", "output.products=['pnetAK4:scores as JetToy']",
        f"services.inference.repository=['{tmp_path / 'models'}']"])
    Process(config).run(progress=False)
    out = branches(path)
    assert {"JetToy_b", "JetToy_c", "JetToy_target_x"} <= out.keys() and out["JetToy_b"].size > 0


def shared_versions() -> list:
    """Every model folder with a preprocess.json in ../shared's CMS repositories (none without ../shared)."""
    found = sorted(p.parent for p in SHARED.glob("real/cms-models*/*/preprocess.json"))
    return [pytest.param(p, id=p.name) for p in found] or [pytest.param(None, id="no-shared")]


@pytest.mark.shared
@pytest.mark.parametrize("folder", shared_versions())
def test_every_reachable_cms_version_runs_from_its_preprocess_json(folder, small_file):
    """Each CMS tagger version the tests can reach, configured by its model name only (the preprocess.json
    read from its folder), on a few generated events, direct: a score per output name for every jet, the
    model's softmax for the jets inside the selection (AK4: |η| ≤ 2.5, as CMS's RECO AK4 taggers; AK8: pT ≥
    200 GeV) and 0 for the others."""
    if folder is None:
        pytest.skip(f"{SHARED} not available (../shared is only beside the development checkout)")
    if load_model_platform(folder) == "pytorch_libtorch":
        pytest.importorskip("torch")
    ak4 = "ak4" in folder.name.lower()
    jets = "Jet" if ak4 else "FatJet"
    settings = AK4.parameters if ak4 else AK8.parameters
    tree = uproot.open(small_file)["Events"]
    cols = {}
    for key, fields in ((jets, BoostedJetTags.jets.fields), (f"{jets}PFCands", BoostedJetTags.constituents.fields),
                        ("PFCands", BoostedJetTags.pfcands.fields), ("SV", BoostedJetTags.svs.fields)):
        arrays = tree.arrays([f"{key}_{f}" for f in fields], entry_stop=4)
        cols[key] = ak.zip({f: arrays[f"{key}_{f}"] for f in fields})
    cut, window = (15.0, 2.5) if ak4 else (200.0, 99.0)
    client = Recording(DirectClient(ModelRepository([folder.parent])))
    try:
        run = run_module(BoostedJetTags, cols, label="tagger", inference=client, model=folder.name, jets=jets,
                         constituents=f"{jets}PFCands", min_jet_pt=cut, max_jet_eta=window, **settings)
    finally:
        client.client.close()
    scores = ak.flatten(run.stacked("scores"))
    labels = load_labels(folder)
    assert scores.fields == labels and len(scores) == ak.sum(ak.num(cols[jets])) > 0
    outputs = np.stack([scores[name].to_numpy() for name in labels], axis=1)
    pt, eta = (ak.flatten(cols[jets][f]).to_numpy() for f in ("pt", "eta"))
    inside = (pt >= cut) & (np.abs(eta) <= window)  # generated jets always have constituents
    assert inside.any() and not inside.all()
    assert (outputs[~inside] == 0).all() and sum(client.rows) == inside.sum()
    np.testing.assert_allclose(outputs[inside].sum(axis=1), 1, atol=1e-4)


def load_model_platform(folder: Path) -> str:
    text = (folder / "config.pbtxt").read_text()
    return text.split('platform:', 1)[1].split('"')[1] if "platform:" in text else ""


# -- a preprocess.json against its model -------------------------------------------------------------------------
def test_a_preprocess_json_paired_with_the_wrong_model_fails_when_the_job_starts(small_file, tmp_path):
    """The AK8 preprocess.json (25 PF features) with the AK4 model (20): one line naming both files, before any
    event is read."""
    config = cfgmod.load("miniaod", [
        f"source.files=['{small_file}']", f"output.file='{tmp_path / 'out.root'}'", "options.progress=false",
        f"modules.pnetAK4.preprocess_json='{AK8.path}'"])
    with pytest.raises(ConfigError) as err:
        Process(config).run(progress=False)
    message = str(err.value)
    assert "\n" not in message and "modules.pnetAK4.preprocess_json" in message
    assert str(AK8.path) in message and "miniaod_particlenet_ak4/1/model.onnx" in message
    assert "'pf_features' has 25 features in preprocess.json, 20 in the model" in message
    assert not (tmp_path / "out.root").exists()


@pytest.mark.parametrize("model, batched, problem", [
    ([("pf_x", "FP32", (3, -1)), ("sv_x", "FP32", (1, -1))], True, None),
    ([("pf_x", "FP32", (-1, -1, -1)), ("sv_x", "FP32", (-1, 1, 4))], False, None),  # no batch axis in dims
    ([("pf_x", "FP32", (3, -1))], True, r"defines inputs \['sv_x', 'pf_x'\], the model has \['pf_x'\]"),
    ([("pf_x", "FP32", (3, -1)), ("sv_y", "FP32", (1, -1))], True, r"the model has \['pf_x', 'sv_y'\]"),
    ([("pf_x", "FP32", (4, -1)), ("sv_x", "FP32", (1, -1))], True, r"'pf_x' has 3 features in preprocess.json, 4"),
    ([("pf_x", "FP32", (3, 3)), ("sv_x", "FP32", (1, -1))], True, r"'pf_x' is 2 to 3 entries long .* exactly 3"),
    ([("pf_x", "FP32", (3, -1)), ("sv_x", "FP32", (1, 5))], True, r"'sv_x' is 4 to 4 entries long .* exactly 5"),
    ([("pf_x", "FP32", (3, -1)), ("sv_x", "FP32", (1, 4))], True, None),  # var_length 4 = the model's fixed 4
    ([("pf_x", "FP16", (3, -1)), ("sv_x", "FP32", (1, -1))], True, r"'pf_x' is FP16 in the model"),
    ([("pf_x", "FP32", (3,)), ("sv_x", "FP32", (1, -1))], True, r"'pf_x' has dims \[3\] in the model"),
])
def test_model_mismatch_names_what_does_not_fit(tmp_path, model, batched, problem):
    spec = load_preprocess(write_preprocess(tmp_path / "preprocess.json"))
    found = model_mismatch(spec, [TensorSpec(*t) for t in model], batched)
    if problem is None:
        assert found is None
    else:
        assert found is not None and re.search(problem, found), found
