"""source.columns: existing modules run on another schema with no code change (renamed and separately stored
branches, field defaults and unit scales, concatenated collections, references turned into index pairs,
alternatives, empty collections, one-object collections as per-event values, names with ':'), and a
malformed mapping is one error naming file, line and key."""

from __future__ import annotations

import logging

import awkward as ak
import numpy as np
import pytest
import uproot

from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.errors import ConfigError, GraphError, SourceError
from sonic_hep.framework.process import Process
from sonic_hep.framework.references import resolve

JETS = ak.Array([[50.0, 30.0, 10.0], [], [70.0, 20.0]])
ETAS = ak.Array([[0.5, -1.0, 3.0], [], [0.1, 2.0]])


@pytest.fixture()
def other_schema(tmp_path):
    """A file in nobody's convention (uproot writes it as an RNTuple): jets also stored as separate fields,
    two candidate collections whose fields are named differently, a one-object MET collection, references by
    unique ID, a ':' in a name."""
    path = tmp_path / "other.root"
    with uproot.recreate(path) as f:
        f["tree"] = {"jetPt": JETS, "jetEta": ETAS, "jet": ak.zip({"PT": JETS, "Eta": ETAS, "Z": JETS / 10.0}),
                     "trk": ak.zip({"PT": ak.Array([[1.0, 2.0], [3.0], []]), "uid": ak.Array([[11, 12], [13], []])}),
                     "gam": ak.zip({"ET": ak.Array([[5.0], [], [6.0, 7.0]]), "uid": ak.Array([[21], [], [22, 23]])}),
                     "met": ak.zip({"MET": ak.Array([[12.5], [], [40.0]])}),
                     "El:pt": np.array([3.0, 4.0, 5.0]),
                     "refs": ak.Array([[[12, 21], [11], []], [], [[23, 99], [22]]])}  # 99: refers to nothing
    return path


def run(tmp_path, path, columns, modules, products, **source):
    config = cfgmod.parse({"source": {"files": [str(path)], "tree": "tree", "columns": columns, **source},
                           "modules": modules, "output": {"file": str(tmp_path / "out.root"), "products": products},
                           "options": {"progress": False}})
    Process(config).run(progress=False)
    return uproot.open(tmp_path / "out.root")["Events"].arrays(library="ak")


def test_an_existing_producer_runs_on_separately_stored_renamed_branches(tmp_path, other_schema):
    out = run(tmp_path, other_schema, {"Jet": {"fields": {"pt": "jetPt", "eta": "jetEta"},
                                               "defaults": {"phi": 0.0, "mass": 0.0}}},
              {"ht": {"type": "CollectionSum", "min_pt": 15.0},
               "good": {"type": "SelectObjects", "min_pt": 25.0, "max_abs_eta": 2.5}},
              ["ht:sum", "good:objects as GoodJet"])
    np.testing.assert_allclose(out["ht_sum"], ak.sum(JETS[JETS > 15], axis=1))
    assert ak.to_list(out["GoodJet_pt"]) == ak.to_list(JETS[(JETS > 25) & (abs(ETAS) < 2.5)])
    assert ak.all(out["GoodJet_mass"] == 0)


def test_fields_renamed_scaled_and_defaulted_from_a_collection(tmp_path, other_schema):
    mapping = {"Jet": {"from": "jet", "fields": {"pt": "PT", "eta": {"from": "Z", "scale": 10.0}},
                       "defaults": {"phi": 1.5, "mass": 4}}}
    out = run(tmp_path, other_schema, mapping,
              {"good": {"type": "SelectObjects", "min_pt": 0.0, "max_abs_eta": 100.0}}, ["good:objects as J"])
    assert ak.to_list(out["J_pt"]) == ak.to_list(JETS)
    np.testing.assert_allclose(ak.flatten(out["J_eta"]), ak.flatten(JETS))  # Z * 10 == PT
    assert ak.to_list(out["J_phi"]) == ak.to_list(JETS * 0 + 1.5) and ak.all(out["J_mass"] == 4)


def test_concatenation_references_alternatives_empty_and_first(tmp_path, other_schema):
    columns = {
        "Cands": {"one_of": [{"from": "PFCandidate"},  # not in this file: the next alternative is used
                             {"concat": [{"from": "trk", "fields": {"pt": "PT"}},
                                         {"from": "gam", "fields": {"pt": "ET"}, "defaults": {"pdgId": 22}}],
                              "defaults": {"pdgId": 211}}]},
        "Pairs": {"references": "jet.refs", "targets": ["trk", "gam"], "id_field": "uid",
                  "index_fields": ["jetIdx", "candIdx"]},
        "Vertices": {"one_of": [{"from": "SV"}, {"empty": True}]},
        "MET_pt": {"from": "met.MET", "first": True, "default": -1.0},
        "Rho": {"from": "rho", "default": 2.5},
    }
    from sonic_hep.framework.config import SourceConfig
    from sonic_hep.framework.source import Request, RootSource

    requests = [Request("Cands", ("pt", "pdgId")), Request("Pairs", ("jetIdx", "candIdx")),
                Request("Vertices", ("x", "y")), Request("MET_pt"), Request("Rho")]
    with pytest.raises(SourceError, match=r"references 'jet.refs' .* \(did you mean 'refs'"):  # before any read
        RootSource(SourceConfig(files=[str(other_schema)], tree="tree", columns=columns), requests)
    columns["Pairs"]["references"] = "refs"
    source = RootSource(SourceConfig(files=[str(other_schema)], tree="tree", columns=columns), requests)
    got = next(source.chunks()).columns
    assert ak.to_list(got["Cands"].pt) == [[1.0, 2.0, 5.0], [3.0], [6.0, 7.0]]
    assert ak.to_list(got["Cands"].pdgId) == [[211, 211, 22], [211], [22, 22]]
    # jet 0 refers to uid 12 (trk 1) and 21 (gam 0 = cand 2); jet 1 to uid 11; uid 99 refers to nothing
    assert ak.to_list(got["Pairs"].jetIdx) == [[0, 0, 1], [], [0, 1]]
    assert ak.to_list(got["Pairs"].candIdx) == [[1, 2, 0], [], [1, 0]]
    assert ak.to_list(ak.num(got["Vertices"])) == [0, 0, 0] and set(got["Vertices"].fields) == {"x", "y"}
    assert np.asarray(got["MET_pt"]).tolist() == [12.5, -1.0, 40.0]
    assert np.asarray(got["Rho"]).tolist() == [2.5, 2.5, 2.5]


def test_references_resolve_by_id_across_events_and_count_the_unresolved():
    refs = ak.Array([[[7, 3], [5]], [[7]], [], [[1, 2, 3]]])
    targets = ak.Array([[3, 5, 7], [9, 7], [4], [3, 2]])
    owner, target, missing = resolve(refs, targets)
    assert ak.to_list(owner) == [[0, 0, 1], [0], [], [0, 0]]
    assert ak.to_list(target) == [[2, 0, 1], [1], [], [1, 0]]
    assert missing == 1  # event 3 refers to ID 1, which it does not have (event 0's IDs do not count)
    owner, target, missing = resolve(ak.Array([[[0x1000003]]]), ak.Array([[0x2000003]]))  # process bits masked
    assert ak.to_list(target) == [[0]] and missing == 0


def test_unresolved_references_are_left_out_with_a_warning(tmp_path, other_schema, caplog):
    from sonic_hep.framework.config import SourceConfig
    from sonic_hep.framework.source import Request, RootSource

    columns = {"Pairs": {"references": "refs", "targets": ["trk", "gam"], "id_field": "uid",
                         "index_fields": ["jetIdx", "candIdx"]}}
    source = RootSource(SourceConfig(files=[str(other_schema)], tree="tree", columns=columns),
                        [Request("Pairs", ("jetIdx", "candIdx"))])
    with caplog.at_level(logging.WARNING, logger="sonic_hep.framework.columns"):
        next(source.chunks())
    assert "1 references of 'refs'" in caplog.text and "left out" in caplog.text


def test_a_name_with_a_colon_reaches_modules_quoted_or_through_an_alias(tmp_path, other_schema):
    out = run(tmp_path, other_schema, {"El_pt": "El:pt"}, {"h": {"type": "Histogram1D", "src": "El_pt", "high": 10.0}},
              ["El_pt"])
    assert out["El_pt"].tolist() == [3.0, 4.0, 5.0]
    with pytest.raises(GraphError, match="no module is labelled 'El'"):  # unquoted, ':' means label:product
        run(tmp_path, other_schema, {}, {"h": {"type": "Histogram1D", "src": "El:pt", "high": 10.0}}, [])
    run(tmp_path, other_schema, {}, {"h": {"type": "Histogram1D", "src": "`El:pt`", "bins": 10, "high": 10.0}}, [])
    assert uproot.open(tmp_path / "out.root")["h/h"].values().tolist() == [0, 0, 0, 1, 1, 1, 0, 0, 0, 0]


@pytest.mark.parametrize("entry, key, message", [
    ({"Jet": 3}, "source.columns.Jet", "must be a name in the file or a mapping"),
    ({"Jet": {"form": "jet"}}, "source.columns.Jet.form", "unknown key (did you mean 'from'?)"),
    ({"Jet": {"from": "jet", "defaults": {"mass": "heavy"}}}, "source.columns.Jet.defaults.mass", "a number"),
    ({"J": {"references": "refs", "targets": ["trk"]}}, "source.columns.J", "'index_fields'"),
    ({"J": {"concat": [{"from": "a"}], "empty": True}}, "source.columns.J", "cannot be combined"),
    ({"J": {"fields": {"pt": {"from": "PT", "scale": "x"}}}}, "source.columns.J.fields.pt.scale", "a number"),
])
def test_a_malformed_mapping_names_file_line_and_key(tmp_path, entry, key, message):
    import yaml

    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"source": {"files": ["x.root"], "columns": entry},
                                    "modules": {"ht": {"type": "CollectionSum"}}}, sort_keys=False))
    with pytest.raises(ConfigError) as err:
        cfgmod.load(str(path))
    text = str(err.value)
    assert text.startswith(f"{path}:") and f"{key}: " in text and message in text, text
    assert err.value.line is not None


def test_a_mapping_error_from_the_command_line_blames_the_command_line(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("source:\n  files: [x.root]\n  columns:\n    Jet:\n      from: jet\n"
                    "      fields: {pt: {from: PT, scale: x}}\nmodules:\n  ht: {type: CollectionSum}\n")
    with pytest.raises(ConfigError) as err:
        cfgmod.load(str(path))
    assert str(err.value).startswith(f"{path}:6: source.columns.Jet.fields.pt.scale: ")  # the nested key's line
    path.write_text("source:\n  files: [x.root]\n  columns:\n    Jet: {from: jet}\n"
                    "modules:\n  ht: {type: CollectionSum}\n")
    with pytest.raises(ConfigError, match=r"^<command line>: source.columns.Jet.form: unknown key"):
        cfgmod.load(str(path), ["source.columns.Jet.form=jet"])


def test_flat_branches_named_with_dots_or_colons_form_collections(tmp_path):
    """ATLAS-style flat names: ``AnalysisElectronsAuxDyn.pt`` branches are the collection
    ``AnalysisElectronsAuxDyn``; a ``:`` name is read quoted, or as a collection of one field."""
    from sonic_hep.framework.config import SourceConfig
    from sonic_hep.framework.source import Request, RootSource

    path = tmp_path / "flat.root"
    pt, eta = ak.Array([[1.0, 2.0], [], [3.0]]), ak.Array([[0.1, 0.2], [], [0.3]])
    with uproot.recreate(path) as f:
        f.mktree("CollectionTree", {"AnalysisElectronsAuxDyn.pt": "var * float64",
                                    "AnalysisElectronsAuxDyn.eta": "var * float64", "EventInfoAuxDyn:mu": np.float32})
        f["CollectionTree"].extend({"AnalysisElectronsAuxDyn.pt": pt, "AnalysisElectronsAuxDyn.eta": eta,
                                    "EventInfoAuxDyn:mu": np.array([20, 30, 40], np.float32)})
    source = RootSource(SourceConfig(files=[str(path)], tree="CollectionTree"),
                        [Request("AnalysisElectronsAuxDyn", ("pt", "eta")), Request("`EventInfoAuxDyn:mu`"),
                         Request("EventInfoAuxDyn", ("mu",))])
    got = next(source.chunks()).columns
    assert ak.to_list(got["AnalysisElectronsAuxDyn"].pt) == ak.to_list(pt)
    assert ak.to_list(got["AnalysisElectronsAuxDyn"].eta) == ak.to_list(eta)
    assert np.asarray(got["`EventInfoAuxDyn:mu`"]).tolist() == [20, 30, 40]
    assert ak.to_list(got["EventInfoAuxDyn"].mu) == [20, 30, 40]


def test_a_collection_of_defaults_only_is_refused_before_reading(other_schema):
    from sonic_hep.framework.config import SourceConfig
    from sonic_hep.framework.source import Request, RootSource

    with pytest.raises(SourceError, match=r"collection 'Jet': none of its fields \['pt'\] comes from .*'empty: true'"):
        RootSource(SourceConfig(files=[str(other_schema)], tree="tree", columns={"Jet": {"defaults": {"pt": 1.0}}}),
                   [Request("Jet", ("pt",))])
