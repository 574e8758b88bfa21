"""configs/miniaod_delphes.yaml on real Delphes 3 output nobody here wrote (scikit-hep-testdata's
``uproot-issue513.root``: 10 events, Jet with TRefArray constituents, EFlowTrack/EFlowPhoton/EFlowNeutralHadron,
no MissingET, FatJet or Rho): the MiniAOD producers run with no code change, their inputs are what plain
uproot reads, and SONIC equals direct."""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest
import uproot

from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.process import Process

from tests.miniaod.conftest import branches
from tests.miniaod.test_sonic import assert_same

skhep_testdata = pytest.importorskip("skhep_testdata")

EFLOW = ("EFlowTrack", "EFlowPhoton", "EFlowNeutralHadron")


@pytest.fixture(scope="module")
def delphes_file() -> str:
    return skhep_testdata.data_path("uproot-issue513.root")


@pytest.fixture(scope="module")
def delphes_tree(delphes_file):
    with uproot.open(delphes_file) as f:
        yield f["Delphes"]


def first_chunk(delphes_file: str, chunk_size: int = 100) -> dict:
    """The columns the source builds for the MiniAOD producers, all 10 events (chunks concatenated)."""
    config = cfgmod.load("miniaod_delphes", [f"source.files=['{delphes_file}']", f"source.chunk_size={chunk_size}"])
    chunks = list(Process(config).source.chunks())
    return {key: ak.concatenate([ak.Array(c.columns[key]) for c in chunks]) for key in chunks[0].columns}


@pytest.mark.parametrize("chunk_size", [100, 3])  # one chunk, and chunk boundaries inside the file
def test_constituents_are_the_jets_trefarray_resolved_value_by_value(delphes_file, delphes_tree, chunk_size):
    columns = first_chunk(delphes_file, chunk_size)
    refs = delphes_tree["Jet/Jet.Constituents"].array().refs
    ids = [np.concatenate([delphes_tree[f"{n}/{n}.fUniqueID"].array()[e].to_numpy() & 0xFFFFFF for n in EFLOW])
           for e in range(delphes_tree.num_entries)]
    pairs = columns["JetPFCands"]
    assert ak.sum(ak.num(pairs)) == ak.sum(ak.num(refs, axis=2)) == 636  # every reference resolved
    for event in range(delphes_tree.num_entries):  # the pairs, as a loop over plain uproot's values finds them
        expected = [(jet, ids[event].tolist().index(uid)) for jet, jet_refs in enumerate(refs[event].tolist())
                    for uid in jet_refs]
        assert list(zip(pairs[event].jetIdx.tolist(), pairs[event].pFCandsIdx.tolist())) == expected


def test_candidates_jets_and_defaults_come_from_the_file(delphes_file, delphes_tree):
    columns = first_chunk(delphes_file)
    pf = columns["PFCands"]
    pt = [delphes_tree["EFlowTrack/EFlowTrack.PT"].array(), delphes_tree["EFlowPhoton/EFlowPhoton.ET"].array(),
          delphes_tree["EFlowNeutralHadron/EFlowNeutralHadron.ET"].array()]
    assert ak.all(pf.pt == ak.concatenate(pt, axis=1))
    n_track, n_photon = ak.num(pt[0]), ak.num(pt[1])
    pdg = ak.to_list(pf.pdgId)
    for event in range(delphes_tree.num_entries):  # documented defaults, per part
        a, b = int(n_track[event]), int(n_track[event] + n_photon[event])
        assert set(pdg[event][:a]) == {211} and set(pdg[event][a:b]) == {22} and set(pdg[event][b:]) == {130}
    d0 = delphes_tree["EFlowTrack/EFlowTrack.D0"].array()
    tracks = pf[ak.local_index(pf.pt) < n_track]
    np.testing.assert_allclose(ak.to_numpy(ak.flatten(tracks.dxy)), ak.to_numpy(ak.flatten(d0)) * 0.1,
                               rtol=1e-6)  # mm → cm
    assert ak.all(columns["Jet"].pt == delphes_tree["Jet/Jet.PT"].array())
    assert ak.all(columns["Tau"].eta == delphes_tree["Jet/Jet.Eta"].array())
    assert ak.all(columns["Tau"].decayMode == 0) and ak.all(ak.num(columns["SV"]) == 0)
    assert ak.all(ak.num(columns["FatJet"]) == 0)  # this card made no FatJet: documented, no AK8 jets
    assert np.isnan(np.asarray(columns["MET_pt"])).all() and (np.asarray(columns["fixedGridRhoFastjetAll"]) == 0).all()


#: the file's card made no AK8 jets; for the end-to-end run its AK4 jets stand in, so that pnetAK8 has work
AK8_FROM_AK4 = ("-p", "source.columns.FatJet={from: Jet, fields: {pt: PT, eta: Eta, phi: Phi, mass: Mass}}",
                "-p", "source.columns.FatJetPFCands={references: Jet.Constituents, "
                      "targets: [EFlowTrack, EFlowPhoton, EFlowNeutralHadron], index_fields: [jetIdx, pFCandsIdx]}")


@pytest.mark.triton
def test_miniaod_on_delphes_sonic_equals_direct(sonic_cli, delphes_file, delphes_tree, tmp_path):
    outputs = {}
    for mode in ("direct", "sonic"):
        path = tmp_path / f"{mode}.root"
        result = sonic_cli("run", "miniaod_delphes", "--input", delphes_file, "-o", path, "--inference", mode,
                           "--no-progress", *AK8_FROM_AK4, check=True)
        assert f"mode {mode}" in result.stdout
        outputs[mode] = branches(path)
    direct, sonic = outputs["direct"], outputs["sonic"]
    n_jets = int(ak.sum(delphes_tree["Jet_size"].array()))
    assert direct["JetPNet_BvsAll"].size == n_jets == direct["TauDeepTau_VSjet"].size
    assert direct["FatJetPNet_TvsQCD"].size == n_jets
    assert direct["DeepMET_pt"].size == delphes_tree.num_entries and np.isfinite(direct["DeepMET_pt"]).all()
    for name in ("JetPNet_BvsAll", "FatJetPNet_TvsQCD", "TauDeepTau_VSjet"):
        assert np.isfinite(direct[name]).all(), name
    probs = np.stack([direct[f"JetPNet_{c}"] for c in ("b", "c", "uds", "g", "pu")])
    np.testing.assert_allclose(probs.sum(axis=0), 1, atol=1e-5)
    assert_same(direct, sonic)
    assert np.isnan(direct["MET_pt"]).all() and direct["MET_pt"].size == delphes_tree.num_entries  # no MissingET
