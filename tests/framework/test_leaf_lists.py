"""Leaf-list structs (a branch written as ``"x/D:y/I:z/B"``, as Mu2e's ``deent`` or BESIII's ``data_ana_kk``) on
files ROOT wrote (scikit-hep-testdata): a module reaches one leaf as a column (``leaflist.x``), a collection of
chosen leaves, or the whole struct as a record; every value equals what plain uproot reads."""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest
import uproot

from sonic_hep.framework import InputTag, Output, Producer
from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.config import SourceConfig
from sonic_hep.framework.errors import ModuleError, SourceError
from sonic_hep.framework.process import Process
from sonic_hep.framework.source import Request, RootSource

skhep_testdata = pytest.importorskip("skhep_testdata")

#: 5 entries of ``struct {double x; int32_t y; int8_t z;}``
LEAFLIST = ("uproot-leaflist.root", "tree", "leaflist")
#: 1933 entries of a 27-leaf struct with an array leaf, ``float[2] MphiK``
BESIII = ("uproot-issue429.root", "data_tr", "data_ana_kk")


def read(name: str, tree: str, requests: list[Request], columns: dict | None = None, chunk: int = 400,
         first: int = 0) -> dict[str, ak.Array]:
    config = SourceConfig(files=[skhep_testdata.data_path(name)], tree=tree, chunk_size=chunk, first_entry=first,
                          columns=columns or {})
    chunks = list(RootSource(config, requests).chunks())
    return {r.key: ak.concatenate([c.columns[r.key] for c in chunks]) for r in requests}


def struct(name: str, tree: str, branch: str, first: int = 0) -> ak.Array:
    """The struct as plain uproot reads it: one record per entry."""
    return uproot.open(skhep_testdata.data_path(name))[tree][branch].array(library="ak", entry_start=first)


@pytest.mark.parametrize("name, tree, branch", [LEAFLIST, BESIII])
def test_a_leaf_a_chosen_collection_and_the_whole_struct_read_as_uproot_reads_them(name, tree, branch):
    truth = struct(name, tree, branch, first=3)
    first, *others = truth.fields
    got = read(name, tree, [Request(f"{branch}.{first}"), Request(branch),
                            Request("picked", (first, others[-1])), Request(f"{branch}.{others[-1]}")],
               columns={"picked": {"from": branch}}, chunk=2 if name == LEAFLIST[0] else 500, first=3)
    assert ak.to_list(got[f"{branch}.{first}"]) == ak.to_list(truth[first])
    assert ak.to_list(got[f"{branch}.{others[-1]}"]) == ak.to_list(truth[others[-1]])
    assert got[branch].fields == truth.fields and ak.to_list(got[branch]) == ak.to_list(truth)
    assert got["picked"].fields == [first, others[-1]]
    assert ak.to_list(got["picked"][first]) == ak.to_list(truth[first])


def test_an_array_leaf_of_a_struct_keeps_its_length():
    got = read(*BESIII[:2], [Request("data_ana_kk.MphiK")])["data_ana_kk.MphiK"]
    assert ak.to_list(got) == ak.to_list(struct(*BESIII).MphiK)
    assert len(got) == 1933 and set(ak.to_list(ak.num(got, axis=1))) == {2}


class LeafListSum(Producer):
    """x + y of every entry, from the struct read whole as a record."""

    columnar = True
    src = InputTag("leaflist", doc="the struct")
    total = Output("x + y")

    def produce(self, events):
        record = events.get(self.src)
        events.put("total", ak.to_numpy(record.x + record.y))


def test_a_job_consumes_a_leaf_and_the_whole_struct_from_its_configuration(tmp_path):
    """Through the configuration: Histogram1D fills from one leaf, a module reads the struct as a record, and
    the output writes a leaf as a branch."""
    path, out = skhep_testdata.data_path(LEAFLIST[0]), tmp_path / "out.root"
    cfg = cfgmod.parse({"source": {"files": [path], "tree": "tree"},
                        "modules": {"h": {"type": "Histogram1D", "src": "leaflist.x", "bins": 10, "high": 10.0},
                                    "sum": {"type": "LeafListSum"}},
                        "output": {"file": str(out), "products": ["sum:total", "leaflist.z as z"]},
                        "options": {"progress": False}})
    result = Process(cfg, module_types={"sum": LeafListSum}).run(progress=False)
    truth = struct(*LEAFLIST)
    assert result.written == 5
    assert result.histograms["h/h"].values().sum() == 5
    assert np.array_equal(result.histograms["h/h"].values(), np.histogram(ak.to_numpy(truth.x), bins=10, range=(0, 10))[0])
    with uproot.open(out) as f:
        written = f["Events"].arrays(["sum_total", "z"], library="np")
    assert np.allclose(written["sum_total"], ak.to_numpy(truth.x + truth.y))
    assert written["z"].tolist() == ak.to_list(truth.z)


def test_histogramming_a_whole_struct_names_its_fields_and_the_leaf_to_give():
    path = skhep_testdata.data_path(LEAFLIST[0])
    cfg = cfgmod.parse({"source": {"files": [path], "tree": "tree"},
                        "modules": {"h": {"type": "Histogram1D", "src": "leaflist"}}, "options": {"progress": False}})
    with pytest.raises(ModuleError) as err:
        Process(cfg).run(progress=False, keep_histograms=True)
    message = str(err.value)
    assert "'leaflist' is a record of fields (x, y, z), not numbers" in message and "src: leaflist.x" in message
    assert "\n" not in message


def test_a_single_column_asked_for_as_a_collection_says_so_without_suggesting_its_own_name():
    """A mapping ``{from: NJet}`` asks for fields of a plain branch: the message says what the branch is, and
    never "'NJet' is not in ... (did you mean 'NJet'?)"."""
    path = skhep_testdata.data_path("uproot-HZZ.root")
    for request, columns in [(Request("jets", ("pt",)), {"jets": {"from": "NJet"}}), (Request("NJet", ("pt",)), {})]:
        with pytest.raises(SourceError) as err:
            RootSource(SourceConfig(files=[path], tree="events", columns=columns), [request])
        message = str(err.value)
        assert "'NJet'" in message and "is one column of" in message and "of type 'int32_t'" in message
        assert "not a collection with fields" in message and "did you mean 'NJet'" not in message


def test_a_leaf_the_struct_lacks_suggests_its_leaves():
    with pytest.raises(SourceError, match=r"'leaflist\.w' is not in .* \(did you mean .*'leaflist\.x'"):
        RootSource(SourceConfig(files=[skhep_testdata.data_path(LEAFLIST[0])], tree="tree"), [Request("leaflist.w")])
