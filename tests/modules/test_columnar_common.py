"""The common and demo modules, columnar (a batch of events per call), equal their per-event versions
(``per_event_reference``) bit for bit — products, filter decisions, histograms — whatever the events per
call, and their products are written with the same branches; on the CMS NanoAOD, on generated
collections with up to ~300 objects an event (numpy's pairwise summation blocks), and through whole jobs."""

from __future__ import annotations

from typing import Any

import awkward as ak
import numpy as np
import pytest
import uproot

from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.output import writable
from sonic_hep.framework.process import Process
from sonic_hep.modules.common.collections import CollectionSum, MinCountFilter, SelectObjects
from sonic_hep.modules.common.dijet import DijetMass
from sonic_hep.modules.common.histograms import Histogram1D
from sonic_hep.modules.common.jagged import event_sums
from sonic_hep.framework.testing import run_module
from sonic_hep.modules.common.synthetic import ColumnarBusyProducer, ColumnarNullProducer, ColumnarSleepExternal

from tests.conftest import PROJECT
from tests.modules import per_event_reference as ref
from tests.modules.conftest import nanoaod_path

#: events per call of the columnar module: one event, a batch that does not divide the events, all of them
PER_CALL = [1, 7, None]


def assert_identical(a: Any, b: Any) -> None:
    """Same type and the same bytes (NaN equal to NaN; -0.0 different from 0.0)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray), (type(a), type(b))
        assert (a.dtype, a.shape) == (b.dtype, b.shape)
        assert a.tobytes() == b.tobytes()
        return
    assert str(a.type) == str(b.type)
    form_a, length_a, buffers_a = ak.to_buffers(ak.to_packed(a))
    form_b, length_b, buffers_b = ak.to_buffers(ak.to_packed(b))
    assert (form_a, length_a) == (form_b, length_b)
    for key in buffers_a:
        assert np.asarray(buffers_a[key]).tobytes() == np.asarray(buffers_b[key]).tobytes(), key


def assert_same_product(reference: Any, columnar: Any) -> None:
    """Bit for bit the same array, and the same branches once written."""
    assert_identical(reference, columnar)
    ref_branches, col_branches = writable("p", reference), writable("p", columnar)
    assert list(ref_branches) == list(col_branches)
    for name in ref_branches:
        assert_identical(ref_branches[name], col_branches[name])


def compare_products(reference: type, columnar: type, inputs: dict[str, Any], per_call: int | None,
                     **params: Any) -> None:
    expected = run_module(reference, inputs, label="m", **params)
    got = run_module(columnar, inputs, label="m", events_per_call=per_call, **params)
    for instance in reference.outputs():
        assert_same_product(expected.stacked(instance), got.stacked(instance))


@pytest.mark.parametrize("per_call", PER_CALL)
@pytest.mark.parametrize("min_pt", [0.0, 25.0])
def test_collection_sum(columns, per_call, min_pt):
    compare_products(ref.RefCollectionSum, CollectionSum, {"Jet": columns["Jet"]}, per_call, min_pt=min_pt)


@pytest.mark.parametrize("per_call", PER_CALL)
def test_select_objects(columns, per_call):
    compare_products(ref.RefSelectObjects, SelectObjects, {"Jet": columns["Jet"]}, per_call,
                     min_pt=25.0, max_abs_eta=2.4)


@pytest.mark.parametrize("per_call", PER_CALL)
def test_dijet_mass(columns, per_call):
    compare_products(ref.RefDijetMass, DijetMass, {"Jet": columns["Jet"]}, per_call)


@pytest.mark.parametrize("per_call", PER_CALL)
@pytest.mark.parametrize("min_count", [1, 2, 4])
def test_min_count_filter(columns, per_call, min_count):
    params = {"min_pt": 30.0, "min_count": min_count}
    expected = run_module(ref.RefMinCountFilter, {"Jet": columns["Jet"]}, **params).passed
    got = run_module(MinCountFilter, {"Jet": columns["Jet"]}, events_per_call=per_call, **params).passed
    assert got == expected
    assert 0 < sum(got) < len(got) or min_count == 1  # a test that keeps or drops everything proves little


@pytest.mark.parametrize("per_call", PER_CALL)
@pytest.mark.parametrize("src", ["Jet_pt", "MET_pt"])
def test_histogram(columns, per_call, src):
    inputs, params = {src: columns[src]}, {"src": src, "bins": 40, "low": 0.0, "high": 200.0, "name": "h"}
    expected = run_module(ref.RefHistogram1D, inputs, **params).histograms["h"]
    got = run_module(Histogram1D, inputs, events_per_call=per_call, **params).histograms["h"]
    assert got.values(flow=True).tobytes() == expected.values(flow=True).tobytes()
    assert got.variances(flow=True).tobytes() == expected.variances(flow=True).tobytes()
    assert expected.sum(flow=True) > 0


def test_event_sums_round_as_numpy_sums_one_event():
    """Float sums of 0 to 400 objects, float32 and float64, integers and booleans (np.sum's dtype)."""
    rng = np.random.default_rng(5)
    for dtype in (np.float32, np.float64, np.int32, np.int64, bool):
        counts = rng.integers(0, 400, 500)
        counts[:3] = counts[-3:] = 0
        values = (rng.exponential(40, counts.sum()) * 5).astype(dtype)
        expected = np.array([np.sum(v) for v in np.split(values, np.cumsum(counts)[:-1])])
        assert_identical(expected, event_sums(values, counts))


def test_columnar_test_modules_put_the_event_indices():
    jets = ak.Array([[1.0]] * 10)
    assert run_module(ColumnarNullProducer, {"x": jets}, events_per_call=4, src="x").stacked("value").tolist() == \
        list(range(10))
    assert run_module(ColumnarBusyProducer, {"x": jets}, events_per_call=3, ms=0.1).products["value"] == \
        list(range(10))
    assert run_module(ColumnarSleepExternal, {"x": jets}, events_per_call=6, ms=1.0).products["value"] == \
        list(range(10))


# -- whole jobs: the same file written by the per-event and the columnar modules ----------------------------

def _job(tmp_path, name: str, modules: dict[str, Any], products: list[str], per_call: int,
         source: dict[str, Any], path: list[str] | None = None, services: dict[str, Any] | None = None) -> dict:
    """Runs a job; returns its output branches (as awkward arrays) and histograms."""
    output = tmp_path / f"{name}.root"
    config: dict[str, Any] = {"source": source, "modules": modules,
                              "output": {"file": str(output), "products": products},
                              "options": {"streams": 2, "threads": 2, "events_per_call": per_call,
                                          "progress": False}}
    if path:
        config["path"] = path
    if services:
        config["services"] = services
    result = Process(cfgmod.parse(config)).run(progress=False)
    with uproot.open(output) as f:
        tree = f["Events"]
        return {"branches": {k: tree[k].array(library="ak") for k in tree.keys()},
                "types": {k: tree[k].typename for k in tree.keys()}, "histograms": result.histograms}


def _assert_same_files(expected: dict, got: dict, tolerance: dict[str, float] | None = None) -> None:
    assert expected["types"] == got["types"]
    for name, array in expected["branches"].items():
        if tolerance and any(name.startswith(prefix) for prefix in tolerance):
            assert ak.all(ak.num(array, axis=-1) == ak.num(got["branches"][name], axis=-1))
            assert np.allclose(ak.to_numpy(ak.flatten(array, axis=None)),
                               ak.to_numpy(ak.flatten(got["branches"][name], axis=None)), atol=1e-5)
        else:
            assert_identical(array, got["branches"][name])


@pytest.mark.parametrize("per_call", [1, 64])
def test_nanoaod_job_writes_the_same_file(tmp_path, per_call):
    """Per-event modules at one event per call, the columnar ones at ``per_call``: the same branches, bytes
    and histograms; the filter passes the same events."""
    source = {"files": [nanoaod_path()], "chunk_size": 50}

    def modules(prefix: str) -> dict[str, Any]:
        return {"ht": {"type": f"{prefix}CollectionSum", "min_pt": 30.0},
                "jets": {"type": f"{prefix}SelectObjects", "min_pt": 30.0},
                "mjj": {"type": f"{prefix}DijetMass"},
                "hpt": {"type": f"{prefix}Histogram1D", "src": "Jet_pt", "name": "pt"},
                "twoJets": {"type": f"{prefix}MinCountFilter", "min_pt": 30.0, "min_count": 2}}

    products = ["ht:sum", "ht:count", "jets:objects as CleanJet", "mjj:mass"]
    path = ["ht", "jets", "mjj", "hpt", "twoJets"]
    expected = _job(tmp_path, "per_event", modules("Ref"), products, 1, source, path)
    got = _job(tmp_path, "columnar", modules(""), products, per_call, source, path)
    _assert_same_files(expected, got)
    assert 0 < len(got["branches"]["ht_sum"]) < 200
    assert got["histograms"]["hpt/pt"].values(flow=True).tobytes() == \
        expected["histograms"]["hpt/pt"].values(flow=True).tobytes()


@pytest.mark.parametrize("per_call", [1, 33])
def test_demo_job_writes_the_same_file(tmp_path, per_call):
    """Toy jets bit for bit (each event's own generator); the tagger's scores to 1e-5 (one request per batch
    instead of one per event)."""
    source = {"type": "empty", "events": 150}
    services = {"inference": {"mode": "direct", "repository": [str(PROJECT / "data" / "models" / "demo")]}}
    modules = {"toyJets": {"type": "RefToyJets"}, "tagger": {"type": "RefToyTagger"}}
    products = ["toyJets:jets", "tagger:scores as ToyJet"]
    expected = _job(tmp_path, "per_event", modules, products, 1, source, services=services)
    modules = {"toyJets": {"type": "ToyJets"}, "tagger": {"type": "ToyTagger"}}
    got = _job(tmp_path, "columnar", modules, products, per_call, source, services=services)
    _assert_same_files(expected, got, tolerance={"ToyJet_": 1e-5})
