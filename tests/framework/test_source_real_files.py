"""The source on ROOT files nobody here wrote (scikit-hep-testdata 0.3.12, which ships them in its wheel, and
the CMS NanoAOD in ../shared): every kind of column read through the source, in several chunks and from an
entry inside the file, equals what plain uproot reads, value by value. Then the errors: a name that does not
exist, a type uproot cannot read, an entry range past the end, and bytes that cannot be decoded."""

from __future__ import annotations

import functools

import awkward as ak
import numpy as np
import pytest
import uproot

from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.config import SourceConfig
from sonic_hep.framework.errors import SourceError
from sonic_hep.framework.process import Process
from sonic_hep.framework.source import Request, RootSource

from tests.conftest import shared_path

skhep_testdata = pytest.importorskip("skhep_testdata")


def data(name: str) -> str:
    return skhep_testdata.data_path(name)


def through_source(path: str, tree: str, requests: list[Request], columns: dict | None = None,
                   first: int = 0, n: int = -1, chunk: int = 7) -> dict[str, ak.Array]:
    """Every requested key over entries [first, first + n), read in chunks of ``chunk`` and concatenated."""
    config = SourceConfig(files=[path], tree=tree, first_entry=first, max_events=n, chunk_size=chunk,
                          columns=columns or {})
    chunks = list(RootSource(config, requests).chunks())
    assert sum(c.length for c in chunks) == (n if n >= 0 else _tree(path, tree).num_entries - first)
    return {r.key: ak.concatenate([c.columns[r.key] for c in chunks]) for r in requests}


@functools.cache
def _tree(path: str, tree: str):
    return uproot.open(path)[tree]


def plain(path: str, tree: str, name: str, first: int = 0, n: int = -1) -> ak.Array:
    """What uproot itself reads for one branch (by its full path) or RNTuple field."""
    stop = None if n < 0 else first + n
    return _tree(path, tree)[name].array(entry_start=first, entry_stop=stop, library="ak")


def same(a: ak.Array, b: ak.Array) -> None:
    assert ak.to_list(a) == ak.to_list(b)


def test_flat_and_jagged_ttree():
    path = data("uproot-HZZ.root")
    got = through_source(path, "events", [Request("NJet"), Request("MET_px"), Request("Jet_Px"),
                                          Request("Jet", ("Px", "Py", "E")), Request("Muon", None)], first=100, n=60)
    for name in ("NJet", "MET_px", "Jet_Px"):
        same(got[name], plain(path, "events", name, 100, 60))
    for field in ("Px", "Py", "E"):
        same(got["Jet"][field], plain(path, "events", f"Jet_{field}", 100, 60))
    assert {"Px", "Charge", "Iso"} <= set(got["Muon"].fields)  # a NanoAOD-style collection, all its fields
    same(got["Muon"].Charge, plain(path, "events", "Muon_Charge", 100, 60))


def test_split_object_ttree_delphes_by_short_name_full_path_and_whole_object():
    path = data("uproot-issue513.root")
    got = through_source(path, "Delphes", [Request("Jet.PT"), Request("Jet/Jet.Eta"), Request("Jet"),
                                           Request("EFlowTrack", ("PT", "D0")), Request("Jet.FracPt")], first=3)
    same(got["Jet.PT"], plain(path, "Delphes", "Jet/Jet.PT", 3))
    same(got["Jet/Jet.Eta"], plain(path, "Delphes", "Jet/Jet.Eta", 3))
    same(got["Jet.FracPt"], plain(path, "Delphes", "Jet/Jet.FracPt[5]", 3))  # TTree::Draw's name, no [5]
    for field in ("PT", "Mass", "FracPt[5]", "SoftDroppedJet", "Constituents"):  # floats, arrays, objects, TRefArray
        same(got["Jet"][field], plain(path, "Delphes", f"Jet/Jet.{field}", 3))
    same(got["EFlowTrack"].D0, plain(path, "Delphes", "EFlowTrack/EFlowTrack.D0", 3))


def test_split_object_ttree_bacon():
    path = data("uproot-mc10events.root")
    got = through_source(path, "Events", [Request("Info", ("runNum", "evtNum")), Request("Muon", ("pt", "eta")),
                                          Request("Info/rhoJet"), Request("pfMET"), Request("Info.nPU")], chunk=4)
    same(got["Info"].evtNum, plain(path, "Events", "Info/evtNum"))
    same(got["Muon"].eta, plain(path, "Events", "Muon/Muon.eta"))
    same(got["Info/rhoJet"], plain(path, "Events", "Info/rhoJet"))
    same(got["pfMET"], plain(path, "Events", "Info/pfMET"))
    same(got["Info.nPU"], plain(path, "Events", "Info/nPU"))  # as TTree::Draw spells it


def test_stl_containers_and_objects():
    path = data("uproot-stl_containers.root")
    names = ["string", "vector_int32", "vector_string", "vector_vector_int32", "set_int32", "map_int32_int16",
             "map_string_vector_string"]
    got = through_source(path, "tree", [Request(n) for n in names], chunk=2)
    for name in names:
        same(got[name], plain(path, "tree", name))
    path = data("uproot-HZZ-objects.root")
    got = through_source(path, "events", [Request("muonp4"), Request("MET"), Request("jetbtag")], first=7, n=40)
    for name in ("muonp4", "MET", "jetbtag"):  # vector<TLorentzVector>, TVector2, vector<float>
        same(got[name], plain(path, "events", name, 7, 40))


def test_nested_rntuple_fields(tmp_path):
    """scikit-hep-testdata 0.3.12 has no RNTuple uproot 5 reads, so this one is written by uproot's writer."""
    path = str(tmp_path / "nested.root")
    events = ak.Array({"my_struct": [{"a": float(i), "sub_struct": {"i": i, "v": [0.5] * (i % 3)}} for i in range(20)],
                      "Muon": [[{"pt": 10.0 * j + i, "eta": 0.1 * j} for j in range(i % 4)] for i in range(20)]})
    with uproot.recreate(path) as f:
        f.mkrntuple("Events", events)
    got = through_source(path, "Events", [Request("my_struct.sub_struct.i"), Request("my_struct.sub_struct.v"),
                                          Request("my_struct"), Request("Muon", ("pt",)), Request("Muon.eta")],
                         first=5, chunk=6)
    same(got["my_struct.sub_struct.i"], events.my_struct.sub_struct.i[5:])
    same(got["my_struct.sub_struct.v"], events.my_struct.sub_struct.v[5:])
    same(got["my_struct"], events.my_struct[5:])
    same(got["Muon"].pt, events.Muon.pt[5:])
    same(got["Muon.eta"], plain(path, "Events", "Muon.eta", 5))


def test_names_with_dots_slashes_and_colons():
    """BDSIM's split objects have ``.`` in names and ``::`` in leaves; a ``:`` in a module's input means a
    product, so such a leaf is quoted (`` `name` ``) or given an alias in ``source.columns``."""
    path = data("uproot-issue371.root")
    got = through_source(path, "Beam", [Request("particle"), Request("Beam.", None), Request("beamEnergy"),
                                        Request("`Beam.GMAD::BeamBase.distrType`")],
                         columns={"particle": "Beam.GMAD::BeamBase.particle",
                                  "beamEnergy": "Beam./Beam.GMAD::BeamBase/Beam.GMAD::BeamBase.beamEnergy"})
    same(got["particle"], plain(path, "Beam", "Beam./Beam.GMAD::BeamBase/Beam.GMAD::BeamBase.particle"))
    same(got["beamEnergy"], plain(path, "Beam", "Beam./Beam.GMAD::BeamBase/Beam.GMAD::BeamBase.beamEnergy"))
    same(got["`Beam.GMAD::BeamBase.distrType`"],
         plain(path, "Beam", "Beam./Beam.GMAD::BeamBase/Beam.GMAD::BeamBase.distrType"))
    same(got["Beam."]["GMAD::BeamBase.X0"], plain(path, "Beam", "Beam./Beam.GMAD::BeamBase/Beam.GMAD::BeamBase.X0"))


@pytest.mark.shared
def test_cms_nanoaod():
    path = str(shared_path("real", "root", "nanoAOD_2015_CMS_Open_Data_ttbar.root"))
    got = through_source(path, "Events", [Request("Jet", ("pt", "eta", "phi")), Request("PuppiMET_pt"),
                                          Request("GenPart", ("pdgId",))], first=50, chunk=64)
    for field in ("pt", "eta", "phi"):
        same(got["Jet"][field], plain(path, "Events", f"Jet_{field}", 50))
    same(got["PuppiMET_pt"], plain(path, "Events", "PuppiMET_pt", 50))
    same(got["GenPart"].pdgId, plain(path, "Events", "GenPart_pdgId", 50))
    config = SourceConfig(files=[path], first_entry=50, chunk_size=64)
    chunk = next(RootSource(config, [Request("PuppiMET_pt")]).chunks())
    np.testing.assert_array_equal(chunk.ids["event"], plain(path, "Events", "event", 50, 64).to_numpy())


# -- errors -------------------------------------------------------------------------------------------
def test_a_name_not_in_the_file_is_named_with_close_names_never_a_corrupt_file():
    path = data("uproot-issue513.root")
    for key, fields, expected in [("Jet.Pt", None, "branch 'Jet.Pt' is not in"),
                                  ("Jet", ("pt",), "field 'pt' of 'Jet': 'pt' is not in collection 'Jet'")]:
        with pytest.raises(SourceError) as err:
            RootSource(SourceConfig(files=[path], tree="Delphes"), [Request(key, fields)])
        message = str(err.value)
        assert expected in message and "did you mean 'PT'" in message.replace("'Jet.PT'", "'PT'")
        assert "corrupt" not in message and "\n" not in message


def test_a_type_uproot_cannot_read_is_one_line_naming_branch_and_type():
    path = data("uproot-issue124.root")
    with pytest.raises(SourceError) as err:
        RootSource(SourceConfig(files=[path], tree="KM3NET_EVENT", columns={"hits": "triggeredHits"}),
                   [Request("hits")])
    message = str(err.value)
    assert "branch 'triggeredHits'" in message and "std::vector<JDAQTriggeredHit>" in message
    assert "uproot cannot read" in message and "\n" not in message


def test_a_type_uproot_fails_to_decode_is_named_as_such_not_as_damaged_entries():
    path = data("uproot-mc10events.root")  # bacon's Info/triggerBits: std::bitset<256>, which uproot cannot decode
    source = RootSource(SourceConfig(files=[path], chunk_size=4, first_entry=4), [Request("triggerBits")])
    with pytest.raises(SourceError) as err:
        next(source.chunks())
    message = str(err.value)
    assert message.startswith("uproot cannot decode branch 'triggerBits' (type 'std::bitset<256>') in ")
    assert "\n" not in message and "damaged" not in message


def test_entries_past_the_end_are_refused_before_reading():
    path = data("uproot-issue513.root")
    with pytest.raises(SourceError, match=r"source.first_entry 10 is past the end of the input: .* has 10 entries"):
        RootSource(SourceConfig(files=[path], tree="Delphes", first_entry=10), [Request("Jet.PT")])
    got = through_source(path, "Delphes", [Request("Jet.PT")], first=8, n=2)  # the last two, exactly
    same(got["Jet.PT"], plain(path, "Delphes", "Jet/Jet.PT", 8, 2))


def test_undecodable_bytes_name_the_branch_and_the_entries_that_failed(tmp_path):
    """A copy of a file with one basket (entries 20-29) garbled: the chunks before it are delivered, then one
    line naming the branch and the chunk's entries; starting at entry 25, the range is 25-34."""
    path = tmp_path / "five_baskets.root"
    with uproot.recreate(path, compression=uproot.ZLIB(1)) as f:
        f.mktree("Events", {"x": np.float64, "y": np.float64})
        for i in range(5):
            f["Events"].extend({"x": np.arange(10 * i, 10 * i + 10, dtype=np.float64) ** 2, "y": np.zeros(10)})
    branch = uproot.open(path)["Events"]["x"]
    assert branch.basket_entry_start_stop(2) == (20, 30)
    seek, size = int(branch.member("fBasketSeek")[2]), int(branch.member("fBasketBytes")[2])
    raw = bytearray(path.read_bytes())
    raw[seek + size - 40:seek + size - 5] = b"\xff" * 35
    path.write_bytes(bytes(raw))
    for first, expected, delivered in [(0, "entries 20 to 29", 20), (25, "entries 25 to 34", 0)]:
        source = RootSource(SourceConfig(files=[str(path)], chunk_size=10, first_entry=first),
                            [Request("x"), Request("y")])
        seen = 0
        with pytest.raises(SourceError) as err:
            for chunk in source.chunks():
                seen += chunk.length
        assert seen == delivered
        message = str(err.value)
        assert f"cannot read branch 'x' (type 'double') at {expected} of {str(path)!r} (damaged bytes?)" in message
        assert "\n" not in message


def test_a_process_reads_delphes_names_from_yaml():
    """Through the configuration: a module consumes a split object's leaf by its name and the whole object."""
    path = data("uproot-issue513.root")
    process = Process(cfgmod.parse({
        "source": {"files": [path], "tree": "Delphes", "columns": {"jets": {"from": "Jet", "fields": {"pt": "PT"}}}},
        "modules": {"ht": {"type": "CollectionSum", "src": "jets"}, "h": {"type": "Histogram1D", "src": "Jet.PT"}}}))
    chunk = next(process.source.chunks())
    same(chunk.columns["jets"].pt, plain(path, "Delphes", "Jet/Jet.PT"))
    same(chunk.columns["Jet.PT"], plain(path, "Delphes", "Jet/Jet.PT"))


def test_an_undecodable_object_is_one_short_line_naming_branch_type_and_file(caplog):
    """EDep-sim's ``std::map<std::string, std::vector<TG4HitSegment>>``: uproot's message (600+ characters, the
    objects it was inside with their memory addresses, then the file and object again) is cut to its problem;
    the whole of it goes to the debug log, which ``-v`` shows."""
    path = data("uproot-issue510b.root")
    # one entry: uproot's failed decode of some entries of this branch takes over 10 GB
    source = RootSource(SourceConfig(files=[path], tree="EDepSimEvents", chunk_size=1, max_events=1),
                        [Request("SegmentDetectors")])
    with caplog.at_level("DEBUG", logger="sonic_hep.framework.uproot_errors"), pytest.raises(SourceError) as err:
        next(source.chunks())
    message = str(err.value)
    assert message.startswith("uproot cannot decode branch 'SegmentDetectors' (type 'std::map<std::string, "
                              f"std::vector<TG4HitSegment>>') in {path!r}: DeserializationError: attempting to get")
    assert "\n" not in message and "0x" not in message and "in object" not in message and "while reading" not in message
    assert len(message) - len(path) <= 200
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "uproot's full message" in logged and "while reading" in logged and "at 0x" in logged


def test_a_tree_name_that_names_another_object_says_what_it_is():
    """``tree: Header`` names a KM3NeT ``Head`` object that uproot cannot even decode; ``tree: hpx`` a histogram
    (it stopped the job with an AttributeError)."""
    for name, tree, what, trees in [("uproot-issue390.root", "Header", "Head", "['E']"),
                                    ("uproot-hepdata-example.root", "hpx", "TH1F", "['ntuple']")]:
        with pytest.raises(SourceError) as err:
            RootSource(SourceConfig(files=[data(name)], tree=tree), [Request("x")])
        assert str(err.value) == (f"{tree!r} in {data(name)!r} is a {what}, not a TTree or RNTuple; "
                                  f"give source.tree one of {trees}")


def test_sonic_run_prints_one_short_line_and_with_v_the_whole_of_uproots_message(sonic_cli, tmp_path):
    config = tmp_path / "edepsim.yaml"
    # one entry: uproot's failed decode of some entries of this branch takes over 10 GB
    config.write_text(f"source: {{files: [{data('uproot-issue510b.root')}], tree: EDepSimEvents, chunk_size: 1, "
                      "max_events: 1}\n"
                      "modules: {h: {type: Histogram1D, src: SegmentDetectors}}\n"
                      f"output: {{file: {tmp_path / 'out.root'}}}\n")
    plain = sonic_cli("run", config, "--no-progress")
    assert plain.returncode == 1
    lines = plain.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sonic: error: uproot cannot decode branch 'SegmentDetectors'")
    assert "0x" not in lines[0]
    verbose = sonic_cli("run", config, "--no-progress", "-v")
    assert verbose.returncode == 1
    assert "uproot's full message: DeserializationError: while reading" in verbose.stderr
