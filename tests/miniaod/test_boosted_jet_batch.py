"""BoostedJetTags on a batch of events: every jet's features and model inputs are the same, bit for bit, as
when its event is built alone; the batch is one request padded across all its jets; the scores come back
per event, events without jets included, and a batch without a jet sends nothing.

The per-event reference is the same builder on one-event batches (what a job with one event per call
sends): a jet's values may not depend on which other events share its batch.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace

import awkward as ak
import numpy as np
import pytest

from sonic_hep.framework.config import SourceConfig
from sonic_hep.framework.inference.repository import load_model
from sonic_hep.framework.source import Request, RootSource
from sonic_hep.framework.testing import run_module
from sonic_hep.modules.miniaod.boosted_jet_tags import BoostedJetTags
from sonic_hep.modules.miniaod.columns import Flat, columns, flat_columns
from sonic_hep.modules.miniaod.particlenet_inputs import AK4, AK8
from sonic_hep.modules.miniaod.preprocess import Preprocess, build_inputs, load_preprocess
from sonic_hep.modules.miniaod.tag_info import FEATURE_BLOCKS, MissingInput, TagInfo, TagInfoSettings

from tests.conftest import shared_path

PROJECT = Path(__file__).resolve().parents[2]
AK4_MODEL = PROJECT / "data" / "models" / "miniaod" / "miniaod_particlenet_ak4"
#: the module's declared fields of each collection it reads
FIELDS = {"Jet": BoostedJetTags.jets.fields, "FatJet": BoostedJetTags.jets.fields,
          "JetPFCands": BoostedJetTags.constituents.fields, "FatJetPFCands": BoostedJetTags.constituents.fields,
          "PFCands": BoostedJetTags.pfcands.fields, "SV": BoostedJetTags.svs.fields,
          "LostTracks": BoostedJetTags.lost_tracks.fields}
#: CHS (every constituent, by pT), PUPPI (weights ≥ 0.01, by weighted pT), and a jet selection with lost tracks
SETTINGS = {"chs": AK4.settings, "puppi": AK8.settings,
            "selected": TagInfoSettings(jet_radius=0.4, min_jet_pt=20.0, max_jet_eta=2.5, min_pt_for_pfcandidates=1.0,
                                        lost_track_max_dr=0.3, lost_track_min_pt=0.5)}


@pytest.fixture(scope="module")
def chunk_columns(small_file) -> dict[str, ak.Array]:
    """Every collection the taggers read, one jagged array over the file's events (as a job's chunk)."""
    source = RootSource(SourceConfig(files=[str(small_file)], chunk_size=10_000),
                        [Request(key, fields) for key, fields in FIELDS.items()])
    chunk = next(iter(source.chunks()))
    return chunk.columns


def batch_info(cols: dict[str, ak.Array], settings: TagInfoSettings, lo: int, hi: int,
               jets: str = "Jet") -> TagInfo:
    """The tag info of events ``lo``..``hi - 1`` as one batch."""
    flat = lambda key: flat_columns(cols[key][lo:hi], FIELDS[key], hi - lo)  # noqa: E731
    return TagInfo.of_batch(settings, flat(jets), flat("PFCands"), flat(f"{jets}PFCands"), flat("SV"),
                            flat("LostTracks"))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shapes, dtypes and bytes (NaNs and signed zeros included)."""
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def feature_rows(info: TagInfo, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """A feature's values with the jet and rank of each row; None when the sample cannot give it."""
    try:
        return info.feature(name), info.entries(name).jet, info.entries(name).rank
    except MissingInput:
        return None


@pytest.mark.parametrize("settings", list(SETTINGS))
def test_every_feature_of_a_batch_is_its_events_own_bit_for_bit(chunk_columns, settings):
    """Every feature the tag-info producer knows, for a batch of events (from event 2: the batch does not
    start at the chunk's first row), equals its events built one by one and concatenated, bit for bit — also
    the one-event constructor the training samples use."""
    cols, chosen = chunk_columns, SETTINGS[settings]
    lo, hi = 2, len(chunk_columns["Jet"])
    batch = batch_info(cols, chosen, lo, hi)
    singles = [batch_info(cols, chosen, i, i + 1) for i in range(lo, hi)]
    alone = [TagInfo(chosen, *(columns(cols[key][i], FIELDS[key]) for key in ("Jet", "PFCands", "JetPFCands", "SV",
                                                                                "LostTracks"))) for i in range(lo, hi)]
    assert batch.n_jets == sum(s.n_jets for s in singles) > 50
    first_jet = np.cumsum([0] + [s.n_jets for s in singles[:-1]])
    compared = 0
    for name in FEATURE_BLOCKS:
        got = feature_rows(batch, name)
        if got is None:
            continue
        for reference in (singles, alone):
            parts = [feature_rows(info, name) for info in reference]
            expected = [np.concatenate([p[0] for p in parts]),
                        np.concatenate([p[1] + j for p, j in zip(parts, first_jet)]),
                        np.concatenate([p[2] for p in parts])]
            for what, a, b in zip(("values", "jet", "rank"), got, expected):
                assert same_bits(a, b.astype(a.dtype, copy=False)), f"{name} {what}"
        compared += 1
    assert compared > 100 and got[0].size > 0


def spec_of(which: str) -> Preprocess:
    """The project's ak4/ak8 preprocess.json, or CMS's particlenet_AK4 one (when ../shared has it)."""
    if which == "cms_ak4":
        return load_preprocess(shared_path("real", "cms-models", "particlenet_AK4") / "preprocess.json")
    return {"ak4": AK4, "ak8": AK8}[which].preprocess


@pytest.mark.parametrize("which, settings", [("ak4", "chs"), ("ak8", "puppi"),
                                             pytest.param("cms_ak4", "chs", marks=pytest.mark.shared)])
def test_batch_inputs_are_each_events_inputs_padded_across_the_batch(chunk_columns, which, settings):
    """One request for the batch: each input is padded to the batch's longest list (clamped to the file's
    bounds); each jet's row holds its event's own inputs bit for bit over the event's length, and padding
    after."""
    spec, chosen = spec_of(which), SETTINGS[settings]
    n = len(chunk_columns["Jet"])
    batch_info_ = batch_info(chunk_columns, chosen, 0, n)
    batch = build_inputs(spec, batch_info_.n_jets, batch_info_.entries, batch_info_.feature)
    first = 0
    for i in range(n):
        info = batch_info(chunk_columns, chosen, i, i + 1)
        alone = build_inputs(spec, info.n_jets, info.entries, info.feature)
        for group in spec.inputs:
            mine, rows = alone[group.name], batch[group.name][first:first + info.n_jets]
            length = mine.shape[2]
            assert same_bits(np.ascontiguousarray(rows[:, :, :length]), mine), (i, group.name)
        first += info.n_jets
    assert first == batch_info_.n_jets
    for group in spec.inputs:
        counts = batch_info_.entries(group.var_names[0]).counts
        expected = min(max(int(counts.max()), group.min_length), group.max_length)
        assert batch[group.name].shape == (first, len(group.var_names), expected), group.name
        # past a jet's entries: the group's pad values
        rank = np.arange(expected)[None, :]
        pad = np.array([info.pad for info in group.infos], np.float32)[None, :, None]
        padded = np.broadcast_to((rank >= counts[:, None])[:, None, :], batch[group.name].shape)
        assert np.array_equal(batch[group.name][padded], np.broadcast_to(pad, batch[group.name].shape)[padded])


class RecordingClient:
    """An inference client that runs no model: it keeps every request and answers, per row, scores that
    depend on the jet's real (masked) entries only, so they do not change with the padding."""

    def __init__(self, info):
        self.info, self.requests = info, []

    def model_info(self, model: str):
        return self.info

    def infer(self, model: str, inputs: dict[str, np.ndarray], outputs: list[str]) -> Future:
        self.requests.append(inputs)
        totals = [(inputs[f"{g}_features"] * inputs[f"{g}_mask"]).astype(np.float64).sum(axis=(1, 2))
                  for g in ("pf", "sv")]
        n_classes = self.info.outputs[0].dims[-1]
        logits = np.stack([totals[i % 2] * (i + 1) * 1e-3 for i in range(n_classes)], axis=1)
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        future: Future = Future()
        future.set_result({outputs[0]: (probs / probs.sum(axis=1, keepdims=True)).astype(np.float32)})
        return future


class _Limited:
    """A model's info with another max_batch_size."""

    def __init__(self, info, max_batch_size: int):
        self._info, self.max_batch_size = info, max_batch_size

    def __getattr__(self, name: str):
        return getattr(self._info, name)


def run_tagger(cols: dict[str, ak.Array], events_per_call: int | None, jets: str = "Jet", max_batch_size: int = 0):
    """BoostedJetTags with the project's AK4 model's preprocess.json over ``cols``; (run, client). A
    ``max_batch_size`` replaces the model's."""
    info = load_model(AK4_MODEL)
    client = RecordingClient(_Limited(info, max_batch_size) if max_batch_size else info)
    inputs = {key: cols[key] for key in (jets, f"{jets}PFCands", "PFCands", "SV", "LostTracks")}
    run = run_module(BoostedJetTags, inputs, label="pnet", services={"inference": SimpleNamespace(client=client)},
                     events_per_call=events_per_call, model="miniaod_particlenet_ak4", jets=jets,
                     constituents=f"{jets}PFCands", jet_radius=0.4,
                     discriminators={"BvsAll": {"numerator": ["b"], "denominator": ["b", "c", "uds", "g"]}})
    return run, client


def test_one_request_per_call_and_scores_split_back_per_event(chunk_columns):
    """Per call, one request whose rows are all the call's jets; the product is one list of per-jet records
    per event with the per-event fields; the scores equal a one-event-per-call run's."""
    n_jets = ak.num(chunk_columns["Jet"]).to_numpy()
    per_event, one_client = run_tagger(chunk_columns, 1)
    batched, client = run_tagger(chunk_columns, 7)
    assert [len(next(iter(r.values()))) for r in client.requests] == \
        [int(n_jets[lo:lo + 7].sum()) for lo in range(0, n_jets.size, 7)]
    assert len(one_client.requests) == int((n_jets > 0).sum())
    stacked = batched.stacked("scores")
    labels = load_model(AK4_MODEL).labels
    assert stacked.fields == [*next(iter(labels.values())), "BvsAll"]
    assert ak.num(stacked).to_numpy().tolist() == n_jets.tolist()
    reference = per_event.stacked("scores")
    assert str(stacked.type) == str(reference.type)
    for field in stacked.fields:
        np.testing.assert_allclose(ak.flatten(stacked[field]).to_numpy(), ak.flatten(reference[field]).to_numpy(),
                                   rtol=0, atol=1e-6, err_msg=field)


def test_jets_of_more_requests_than_one_are_ordered_by_length_and_each_request_padded_to_its_own(chunk_columns):
    """A batch needing several requests (max_batch_size 16): exactly ⌈jets / 16⌉ of them, each padded only to the
    longest of its own jets (shorter than the batch's longest), and the scores back in the jets' order, equal to a
    single unsplit request's."""
    whole, _ = run_tagger(chunk_columns, None)
    split, client = run_tagger(chunk_columns, None, max_batch_size=16)
    n_jets = int(ak.sum(ak.num(chunk_columns["Jet"])))
    rows = [len(r["pf_points"]) for r in client.requests]
    assert len(rows) == -(-n_jets // 16) and sum(rows) == n_jets and max(rows) <= 16
    lengths = [r["pf_points"].shape[2] for r in client.requests]
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]  # ordered by length: the first are shorter
    for request in client.requests:  # each padded to its longest jet: some jet fills the last slot
        assert request["pf_mask"][:, 0, -1].any() or request["pf_points"].shape[2] == 8  # (or the minimum length)
    for field in whole.stacked("scores").fields:
        np.testing.assert_array_equal(ak.flatten(split.stacked("scores")[field]).to_numpy(),
                                      ak.flatten(whole.stacked("scores")[field]).to_numpy(), err_msg=field)


def test_events_without_jets_get_an_empty_list_and_a_call_without_jets_sends_nothing(chunk_columns):
    """FatJets: most events have none. A call whose events have none sends no request and puts an empty list
    per event; a call mixing both sends only the jets it has."""
    counts = ak.num(chunk_columns["FatJet"]).to_numpy()
    assert (counts == 0).any() and (counts > 0).any()
    empty = np.flatnonzero(counts == 0)[:5]
    cols = {key: value[empty] for key, value in chunk_columns.items()}
    run, client = run_tagger(cols, None, jets="FatJet")
    assert client.requests == [] and [len(s) for s in run.products["scores"]] == [0] * empty.size
    assert run.stacked("scores").fields[-1] == "BvsAll"
    run, client = run_tagger(chunk_columns, None, jets="FatJet")
    assert len(client.requests) == 1 and len(client.requests[0]["pf_mask"]) == counts.sum()
    assert [len(s) for s in run.products["scores"]] == counts.tolist()


def test_flat_columns_of_a_sliced_or_selected_batch(chunk_columns):
    """A batch is a slice of the chunk (offsets not from 0) or, behind a filter, a selection of its events:
    both flatten to the events' own rows."""
    jets = chunk_columns["Jet"]
    for events in (slice(3, 9), np.array([1, 4, 5, 11])):
        flat = flat_columns(jets[events], ("pt", "eta"), len(jets[events]))
        assert isinstance(flat, Flat) and flat.counts.tolist() == ak.num(jets[events]).to_list()
        assert flat.columns["pt"].tolist() == ak.flatten(jets[events].pt).to_list()
    absent = flat_columns(None, ("pt",), 3)
    assert absent.counts.tolist() == [0, 0, 0] and absent.columns["pt"].size == 0
