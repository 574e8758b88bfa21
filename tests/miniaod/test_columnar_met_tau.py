"""DeepMET and DeepTau built for a batch of events at once: each event's (or τ's) model inputs are bit-identical
to those built for it alone, whatever the batch; the products keep the layout the per-event producers wrote."""

from __future__ import annotations

from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import uproot

from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.batch import stack
from sonic_hep.framework.config import SourceConfig
from sonic_hep.framework.inference.fake import FakeClient, constant, use_client
from sonic_hep.framework.inference.repository import ModelRepository
from sonic_hep.framework.output import writable
from sonic_hep.framework.process import Process
from sonic_hep.framework.source import Request, RootSource
from sonic_hep.modules.miniaod import deepmet, deeptau_inputs
from sonic_hep.modules.miniaod.columns import flat_columns
from sonic_hep.modules.miniaod.deeptau import per_event, scores_from_probabilities
from sonic_hep.modules.miniaod.deeptau_inputs import ELECTRON_FIELDS, MUON_FIELDS, PF_FIELDS, TAU_FIELDS

from tests.miniaod.conftest import run_config

PROJECT = Path(__file__).resolve().parents[2]

RHO = "fixedGridRhoFastjetAll"
TAU_REQUESTS = {"Tau": TAU_FIELDS, "PFCands": PF_FIELDS, "Electron": ELECTRON_FIELDS, "Muon": MUON_FIELDS}


def read_chunk(path: Path, requests: dict[str, tuple[str, ...] | None]) -> dict:
    """The whole file as the framework reads one chunk: collections zipped into records, one entry per event."""
    source = RootSource(SourceConfig(files=[str(path)], chunk_size=10_000),
                        [Request(key, fields) for key, fields in requests.items()])
    return next(source.chunks()).columns


@pytest.fixture(scope="module")
def tau_chunk(small_file) -> dict:
    return read_chunk(small_file, {**TAU_REQUESTS, RHO: None})


@pytest.fixture(scope="module")
def met_chunk(small_file) -> dict:
    return read_chunk(small_file, {"PFCands": deepmet.FIELDS})


def tau_inputs(chunk: dict, start: int, stop: int, leptons: bool = True) -> dict[str, np.ndarray]:
    """DeepTau inputs of events ``start:stop`` as one batch (a slice of the chunk, as a batch is)."""
    n = stop - start
    flat = {key: flat_columns(chunk[key][start:stop], fields, n) for key, fields in TAU_REQUESTS.items()}
    reco = {name: flat[name] if leptons else None for name in ("Electron", "Muon")}
    return deeptau_inputs.batch_deeptau_inputs(flat["PFCands"], flat["Tau"], np.asarray(chunk[RHO][start:stop]), reco)


def assert_bitwise_equal(batch: dict[str, np.ndarray], alone: list[dict[str, np.ndarray]]) -> None:
    assert alone, "no events compared"
    for key, values in batch.items():
        expected = np.concatenate([one[key] for one in alone])
        assert values.dtype == expected.dtype and values.shape == expected.shape, key
        assert values.tobytes() == expected.tobytes(), f"{key} differs between the batch and its events alone"


@pytest.mark.parametrize("leptons", [True, False])
def test_deeptau_batch_inputs_are_the_inputs_of_each_event_alone(tau_chunk, leptons):
    n = len(tau_chunk["Tau"])
    counts = ak.num(tau_chunk["Tau"]).to_numpy()
    assert (counts == 0).any() and (counts > 1).any()  # events without τs and with several are in the batch
    start, stop = 1, n - 1  # a slice of the chunk: the collections' offsets do not start at 0
    batch = tau_inputs(tau_chunk, start, stop, leptons)
    assert len(batch) == 7 and all(len(v) == counts[start:stop].sum() for v in batch.values())
    assert_bitwise_equal(batch, [tau_inputs(tau_chunk, k, k + 1, leptons) for k in range(start, stop)])
    assert all(np.count_nonzero(v) for v in batch.values())  # every block has filled cells


def test_deeptau_batch_inputs_match_the_one_event_function(tau_chunk):
    """The one-event function (training-set builders use it) is the batch build on one event."""
    k = int(np.argmax(ak.num(tau_chunk["Tau"]).to_numpy()))
    one = {key: {name: ak.to_numpy(tau_chunk[key][k][name]) for name in fields} for key, fields in TAU_REQUESTS.items()}
    alone = deeptau_inputs.deeptau_inputs(one["PFCands"], one["Tau"], float(tau_chunk[RHO][k]),
                                          {"Electron": one["Electron"], "Muon": one["Muon"]})
    assert_bitwise_equal(tau_inputs(tau_chunk, k, k + 1), [alone])


def test_deeptau_batch_without_taus_gives_no_rows(tau_chunk):
    empty = np.flatnonzero(ak.num(tau_chunk["Tau"]).to_numpy() == 0)
    k = int(empty[0])
    inputs = tau_inputs(tau_chunk, k, k + 1)
    assert inputs["input_tau"].shape == (0, 43) and inputs["input_outer_egamma"].shape == (0, 21, 21, 86)


@pytest.mark.parametrize("max_candidates", [4500, 300])
def test_deepmet_batch_inputs_are_the_inputs_of_each_event_alone(met_chunk, max_candidates):
    pf = met_chunk["PFCands"]
    n = len(pf)
    counts = ak.num(pf).to_numpy()
    if max_candidates < 4500:
        assert (counts > max_candidates).any()  # the truncation is exercised

    def inputs(start: int, stop: int) -> dict[str, np.ndarray]:
        return deepmet.batch_deepmet_inputs(flat_columns(pf[start:stop], deepmet.FIELDS, stop - start), max_candidates)

    batch = inputs(2, n)
    assert batch["input"].shape == (n - 2, max_candidates, 8)
    assert_bitwise_equal(batch, [inputs(k, k + 1) for k in range(2, n)])
    one = {name: ak.to_numpy(pf[5][name]) for name in deepmet.FIELDS}
    assert_bitwise_equal(inputs(5, 6), [deepmet.deepmet_inputs(one, max_candidates)])


def test_deepmet_product_is_written_as_the_per_event_floats_were():
    outputs = np.array([[0.5, -0.25], [0.0, 0.0], [-1.5, 2.0]], dtype=np.float32)
    got = writable("DeepMET", deepmet.met_from_outputs(outputs, 50.0))
    per_event = []
    for row in outputs:  # the per-event producer's product
        px, py = (float(v) * 50.0 for v in row[:2])
        per_event.append({"pt": float(np.hypot(px, py)), "phi": float(np.arctan2(py, px)), "px": px, "py": py})
    expected = writable("DeepMET", stack(per_event))
    assert list(got) == list(expected) == ["DeepMET_pt", "DeepMET_phi", "DeepMET_px", "DeepMET_py"]
    for name in expected:
        assert ak.to_numpy(got[name]).dtype == np.float64
        assert ak.to_numpy(got[name]).tobytes() == ak.to_numpy(expected[name]).tobytes(), name


def test_deeptau_product_is_written_as_the_per_event_dicts_were():
    counts = np.array([2, 0, 3, 1])
    probs = np.random.default_rng(3).dirichlet(np.ones(4), counts.sum()).astype(np.float32)
    probs[0] = 0.0  # no τ nor e probability: VSe is 0
    got = writable("TauDeepTau", per_event(scores_from_probabilities(probs), counts))
    bounds = np.concatenate([[0], np.cumsum(counts)])
    expected = writable("TauDeepTau", stack([scores_from_probabilities(probs[a:b])
                                             for a, b in zip(bounds[:-1], bounds[1:])]))
    assert list(got) == list(expected) == ["TauDeepTau"]
    assert str(got["TauDeepTau"].type) == str(expected["TauDeepTau"].type)
    assert got["TauDeepTau"].fields == ["e", "mu", "tau", "jet", "VSe", "VSmu", "VSjet"]
    assert ak.to_list(got["TauDeepTau"]) == ak.to_list(expected["TauDeepTau"])
    empty = writable("TauDeepTau", per_event(scores_from_probabilities(np.zeros((0, 4), np.float32)), np.zeros(3, int)))
    assert ak.num(empty["TauDeepTau"]).tolist() == [0, 0, 0]


def run_on_fake_client(small_file: Path, out: Path, *overrides: str) -> FakeClient:
    """configs/miniaod.yaml on a fake client answering DeepMET and DeepTau with constants; returns the client."""
    repository = ModelRepository([str(PROJECT / "data" / "models" / "miniaod")])
    client = FakeClient()
    client.add(repository.get("miniaod_deepmet"), constant({"output": np.float32([0.5, -0.5])}))
    client.add(repository.get("miniaod_deeptau"), constant({"main_output": np.float32([0.25, 0.25, 0.25, 0.25])}))
    for model in ("miniaod_particlenet_ak4", "miniaod_particlenet_ak8"):
        info = repository.get(model)
        client.add(info, constant({info.outputs[0].name: np.zeros(info.outputs[0].dims[-1], np.float32)}))
    config = cfgmod.load("miniaod", [f"source.files=['{small_file}']", f"output.file='{out}'",
                                     "options.progress=false", *overrides])
    process = Process(config)
    use_client(process, client)
    process.run(progress=False)
    return client


def test_one_request_per_batch_and_none_for_a_batch_without_taus(small_file, tmp_path):
    taus = uproot.open(small_file)["Events"]["nTau"].array(library="np")
    client = run_on_fake_client(small_file, tmp_path / "batch.root", "source.max_events=12",
                                "options.events_per_call=12")
    assert client.calls["miniaod_deeptau"] == 1 and client.calls["miniaod_deepmet"] == 1
    rows = {model: sum(len(request[name]) for m, request in client.requests if m == model)
            for model, name in (("miniaod_deeptau", "input_tau"), ("miniaod_deepmet", "input"))}
    assert rows == {"miniaod_deeptau": taus[:12].sum(), "miniaod_deepmet": 12}
    with uproot.open(tmp_path / "batch.root") as file:
        assert file["Events"]["nTauDeepTau"].array(library="np").tolist() == taus[:12].tolist()
        assert np.allclose(file["Events"]["DeepMET_px"].array(library="np"), 25.0)

    empty = int(np.flatnonzero(taus == 0)[0])
    client = run_on_fake_client(small_file, tmp_path / "empty.root", f"source.first_entry={empty}",
                                "source.max_events=1")
    assert client.calls["miniaod_deeptau"] == 0 and client.calls["miniaod_deepmet"] == 1
    with uproot.open(tmp_path / "empty.root") as file:
        assert file["Events"]["nTauDeepTau"].array(library="np").tolist() == [0]


def test_outputs_agree_whatever_the_events_per_call(small_file, tmp_path):
    """One event per call (the per-event granularity) and several: the same branches, DeepTau's and DeepMET's
    values within 1e-5 in the model's units (DeepMET's momenta over its 50 GeV scale)."""
    outputs = {}
    for n in (1, 7):
        run_config("miniaod", small_file, tmp_path / f"out{n}.root", f"options.events_per_call={n}")
        tree = uproot.open(tmp_path / f"out{n}.root")["Events"]
        names = [k for k in tree.keys() if k.startswith(("DeepMET_", "TauDeepTau_", "nTauDeepTau"))]
        outputs[n] = {name: (tree[name].typename, tree[name].array(library="ak")) for name in names}
    assert list(outputs[1]) == list(outputs[7]) and len(outputs[1]) == 12
    for name, (typename, one) in outputs[1].items():
        other_type, other = outputs[7][name]
        assert typename == other_type, name
        assert len(one) == len(other) == 24, name
        if one.ndim > 1:  # the same τs in each event
            assert ak.num(one).tolist() == ak.num(other).tolist(), name
        a, b = (ak.to_numpy(ak.flatten(x, axis=None)).astype(np.float64) for x in (one, other))
        if name == "DeepMET_phi":  # through px, py: an angle of a small MET moves more
            continue
        scale = deepmet.DeepMETProducer.norm_factor.default if name in ("DeepMET_pt", "DeepMET_px", "DeepMET_py") else 1
        assert np.abs(a - b).max() / scale <= 1e-5, name
