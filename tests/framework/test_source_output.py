"""Source and output with real ROOT files: round trips, entry ranges, NanoAOD layout, clear errors."""

from __future__ import annotations

import json
import shutil

import awkward as ak
import numpy as np
import pytest
import uproot

import tests.framework.modules_for_tests  # noqa: F401
from sonic_hep.framework import Process, SourceError
from sonic_hep.framework import config as cfgmod
from tests.conftest import shared_path
from tests.framework.conftest import make_events


def run(data, **kwargs):
    return Process(cfgmod.parse(data, file="test.yaml")).run(progress=False, **kwargs)


def test_round_trip_products_and_passthrough(tmp_path, nano_files):
    out = tmp_path / "out.root"
    result = run({"source": {"files": [str(f) for f in nano_files], "chunk_size": 32},
                  "modules": {"ht": {"type": "CollectionSum", "min_pt": 30.0},
                              "good": {"type": "SelectObjects", "min_pt": 25.0, "max_abs_eta": 2.4}},
                  "output": {"file": str(out), "chunk_size": 50,
                             "products": ["ht:*", "good:objects as GoodJet", "MET_pt", "Jet"]},
                  "options": {"streams": 4, "threads": 2}})
    assert result.events == 240 == result.written
    expected = [make_events(150, 1), make_events(90, 2, 1000)]
    with uproot.open(out) as f:
        tree = f["Events"]
        assert tree.num_entries == 240
        assert {"nGoodJet", "GoodJet_pt", "GoodJet_eta", "ht_sum", "ht_count", "MET_pt", "nJet", "Jet_pt",
                "run", "luminosityBlock", "event"} <= set(tree.keys())
        got = tree.arrays(library="ak")
        meta = json.loads(str(f["sonic_metadata"]))
    jets = ak.concatenate([e["Jet"] for e in expected])
    np.testing.assert_array_equal(got["event"], np.concatenate([e["event"] for e in expected]))
    np.testing.assert_allclose(got["MET_pt"], np.concatenate([e["MET_pt"] for e in expected]))
    assert ak.all(got["Jet_pt"] == jets.pt)
    ht = ak.sum(jets.pt[jets.pt >= 30.0], axis=1)
    np.testing.assert_allclose(got["ht_sum"], ht, rtol=1e-6)
    sel = jets[(jets.pt >= 25.0) & (abs(jets.eta) <= 2.4)]
    assert ak.all(got["nGoodJet"] == ak.num(sel)) and ak.all(got["GoodJet_eta"] == sel.eta)
    assert meta["events_written"] == 240 and meta["config"]["modules"]["ht"]["type"] == "CollectionSum"
    assert meta["version"]


def test_entry_range_spans_files(tmp_path, nano_files):
    out = tmp_path / "range.root"
    run({"source": {"files": [str(f) for f in nano_files], "first_entry": 140, "max_events": 20, "chunk_size": 8},
         "modules": {"ht": {"type": "CollectionSum"}}, "output": {"file": str(out)}})
    events = uproot.open(out)["Events"]["event"].array(library="np")
    assert events.tolist() == list(range(141, 151)) + list(range(1000, 1010))


def test_only_consumed_branches_are_read(nano_files):
    process = Process(cfgmod.parse({"source": {"files": [str(nano_files[0])]},
                                    "modules": {"ht": {"type": "CollectionSum"}}}, file="t.yaml"))
    chunk = next(process.source.chunks())
    assert list(chunk.columns) == ["Jet"] and chunk.columns["Jet"].fields == ["pt"]


def test_glob_and_missing_file(tmp_path, nano_files):
    pattern = str(nano_files[0].parent / "*.root")
    process = Process(cfgmod.parse({"source": {"files": [pattern]}, "modules": {"ht": {"type": "CollectionSum"}}}))
    assert process.source.total == 240
    with pytest.raises(SourceError) as err:
        Process(cfgmod.parse({"source": {"files": [str(tmp_path / "nope.root")]},
                              "modules": {"ht": {"type": "CollectionSum"}}}))
    assert "nope.root" in str(err.value) and "does not exist" in str(err.value)


def test_urls_are_passed_to_uproot(tmp_path, nano_files):
    out = tmp_path / "url.root"
    result = run({"source": {"files": [nano_files[1].resolve().as_uri()]}, "modules": {"ht": {"type": "CollectionSum"}},
                  "output": {"file": str(out)}})
    assert result.events == 90
    assert uproot.open(out)["Events"]["event"].array(library="np")[0] == 1000


def test_corrupt_file_is_named(tmp_path, nano_files):
    bad = tmp_path / "corrupt.root"
    data = nano_files[0].read_bytes()
    bad.write_bytes(data[: len(data) // 3])
    with pytest.raises(SourceError) as err:
        run({"source": {"files": [str(bad)]}, "modules": {"ht": {"type": "CollectionSum"}}})
    assert "corrupt.root" in str(err.value)
    garbage = tmp_path / "garbage.root"
    garbage.write_bytes(b"not a root file" * 100)
    with pytest.raises(SourceError) as err:
        run({"source": {"files": [str(garbage)]}, "modules": {"ht": {"type": "CollectionSum"}}})
    assert "garbage.root" in str(err.value) and "cannot open" in str(err.value)


def test_missing_tree_and_branch_are_named(nano_files):
    with pytest.raises(SourceError) as err:
        Process(cfgmod.parse({"source": {"files": [str(nano_files[0])], "tree": "Event"},
                              "modules": {"ht": {"type": "CollectionSum"}}}))
    assert "no tree or RNTuple 'Event'" in str(err.value) and "did you mean 'Events'" in str(err.value)
    with pytest.raises(SourceError) as err:
        Process(cfgmod.parse({"source": {"files": [str(nano_files[0])]},
                              "modules": {"ht": {"type": "CollectionSum", "src": "FatJet"}}}))
    assert "FatJet_pt" in str(err.value) and "a.root" in str(err.value)


def test_a_job_reading_no_branch_still_gets_every_event(tmp_path):
    """A file without id branches, and modules that read nothing from it: the chunks still carry their
    entries (uproot reads no array, so the lengths come from the entry ranges)."""
    path = tmp_path / "noids.root"
    with uproot.recreate(path) as f:
        f["Events"] = {"x": np.arange(25, dtype=np.float32)}
    out = tmp_path / "out.root"
    result = run({"source": {"files": [str(path)], "chunk_size": 10, "first_entry": 3},
                  "modules": {"r": {"type": "TRandom"}}, "output": {"file": str(out)}})
    assert result.events == 22
    assert len(uproot.open(out)["Events"]["r_value"].array(library="np")) == 22


def test_rntuple_source(tmp_path):
    path = tmp_path / "rntuple.root"
    columns = make_events(30, seed=5)
    with uproot.recreate(path) as f:
        f.mkrntuple("Events", {"event": columns["event"], "Jet_pt": columns["Jet"].pt})
    out = tmp_path / "out.root"
    run({"source": {"files": [str(path)]}, "modules": {"ht": {"type": "CollectionSum"}},
         "output": {"file": str(out)}})
    got = uproot.open(out)["Events"]["ht_sum"].array(library="np")
    np.testing.assert_allclose(got, ak.sum(columns["Jet"].pt, axis=1), rtol=1e-6)


def test_histograms_summed_over_streams(tmp_path, nano_files):
    out = tmp_path / "hist.root"
    run({"source": {"files": [str(nano_files[0])], "chunk_size": 16},
         "modules": {"h": {"type": "Histogram1D", "src": "MET_pt", "bins": 20, "high": 200.0}},
         "output": {"file": str(out), "products": []}, "options": {"streams": 3, "threads": 2}})
    values = uproot.open(out)["h/h"].values(flow=True)
    assert values.sum() == 150


def test_real_cms_nanoaod(tmp_path):
    nano = shared_path("real", "root", "nanoAOD_2015_CMS_Open_Data_ttbar.root")
    out = tmp_path / "cms.root"
    result = run({"source": {"files": [str(nano)], "chunk_size": 64},
                  "modules": {"ht": {"type": "CollectionSum", "min_pt": 20.0},
                              "two": {"type": "MinCountFilter", "min_pt": 30.0, "min_count": 2}},
                  "output": {"file": str(out)}, "options": {"streams": 2, "threads": 2}})
    truth = uproot.open(nano)["Events"].arrays(["Jet_pt", "event"])
    keep = ak.sum(truth.Jet_pt >= 30.0, axis=1) >= 2
    assert result.events == 200 and result.written == int(ak.sum(keep))
    got = uproot.open(out)["Events"].arrays(["ht_sum", "event"], library="np")
    np.testing.assert_array_equal(got["event"], ak.to_numpy(truth.event[keep]))
    pt = truth.Jet_pt[keep]
    np.testing.assert_allclose(got["ht_sum"], ak.sum(pt[pt >= 20.0], axis=1), rtol=1e-6)


def test_output_directory_must_exist(tmp_path, nano_files):
    from sonic_hep.framework import OutputError

    with pytest.raises(OutputError) as err:
        run({"source": {"files": [str(nano_files[0])]}, "modules": {"ht": {"type": "CollectionSum"}},
             "output": {"file": str(tmp_path / "no" / "dir" / "out.root")}})
    assert "does not exist" in str(err.value)
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.parametrize("first, message", [
    (20, "'{a}' has 20 entries"),
    (1000, "'{a}' has 20 entries"),
])
def test_first_entry_past_the_end_names_the_file_and_its_entries(tmp_path, first, message):
    from tests.framework.conftest import write_nano

    a = write_nano(tmp_path / "a.root", 20, seed=3)
    with pytest.raises(SourceError) as err:
        run({"source": {"files": [str(a)], "first_entry": first}, "modules": {"ht": {"type": "CollectionSum"}},
             "output": {"file": str(tmp_path / "out.root")}})
    assert f"source.first_entry {first} is past the end" in str(err.value)
    assert message.format(a=a) in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.root"]


def test_first_entry_past_the_end_of_several_files(tmp_path, nano_files):
    with pytest.raises(SourceError, match=r"the 2 input files have 240 entries \(a.root: 150, b.root: 90\)"):
        run({"source": {"files": [str(f) for f in nano_files], "first_entry": 240},
             "modules": {"ht": {"type": "CollectionSum"}}})


def test_empty_source_range(tmp_path):
    with pytest.raises(SourceError, match="outside the empty source's 10 events"):
        run({"source": {"type": "empty", "events": 10, "first_entry": 10}, "modules": {"v": {"type": "TAdd"}}})
    result = run({"source": {"type": "empty", "events": 10, "first_entry": 6, "max_events": 8},
                  "modules": {"v": {"type": "TAdd"}}})
    assert result.events == 4  # entries 6..9: max_events is at most, not past the end


def test_histogram_only_job_on_a_file_without_event_ids(tmp_path):
    """No run/lumi/event and no product to write: the tree counts the events, the histograms are kept."""
    path = tmp_path / "noid.root"
    with uproot.recreate(path) as f:
        f["Events"] = {"MET_pt": np.arange(20, dtype=np.float32)}
    out = tmp_path / "hist.root"
    result = run({"source": {"files": [str(path)], "chunk_size": 8},
                  "modules": {"h": {"type": "Histogram1D", "src": "MET_pt", "bins": 10, "high": 20.0}},
                  "output": {"file": str(out)}})
    assert result.output == str(out)
    with uproot.open(out) as f:
        assert f["h/h"].values().sum() == 20
        assert f["Events"]["event_index"].array(library="np").tolist() == list(range(20))


def test_histograms_without_an_output_file_are_refused_before_the_first_event(tmp_path, nano_files):
    from sonic_hep.framework import ConfigError

    with pytest.raises(ConfigError, match=r"output.file: module\(s\) h fill histograms, but there is no output file"):
        run({"source": {"files": [str(nano_files[0])]},
             "modules": {"h": {"type": "Histogram1D", "src": "MET_pt"}, "t": {"type": "TSleep", "ms": 60000.0}}})
