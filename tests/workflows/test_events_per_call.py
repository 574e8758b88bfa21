"""Outputs do not depend on how many events a call takes (``options.events_per_call``).

For every shipped configuration (configs/*.yaml) a small input is run with one event per call (CMSSW's
granularity, the reference), with a number of events per call that divides neither the events nor the
chunks (7 for most; chunk boundaries inside the file as well), and with the scheduler's own choice (0); direct
inference. The outputs must be:

* bit for bit equal (same branches, same types, same bytes) for every branch no model touches: event ids,
  the source's columns copied through, the counters of every collection;
* within the README's direct/SONIC tolerance for what the models give (and what is computed from it: the
  discriminators, Michel decisions, tracks): 1e-5 in the model's own units — probabilities as they are,
  DeepMET's momenta divided by the 50 GeV the producer scales them by, its φ through px and py.

The timing report's visited/passed/failed counts must be the same per module, and a module is called once per
batch when it is columnar, once per event otherwise.

Then with a real Triton server (``triton``): the client's own counters of a MiniAOD run (calls, requests, rows per
model) are exactly what the batches carry, computed from the input file with plain uproot (Σ over batches of
⌈rows in the batch / max_batch_size⌉, on a copy of the repository with small max_batch_size so that batches are
split), and SONIC equals direct within the tolerance. Last, a task of jobs over entry ranges not aligned to the
batches (``sonic submit --events-per-job``, local executor, then ``sonic merge``) equals one single run.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import uproot

from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.process import Process
from sonic_hep.modules.miniaod.deepmet import DeepMETProducer
from tests.conftest import PROJECT, shared_path
from tests.miniaod.conftest import SMALL_SEED

#: the README's direct/SONIC tolerance, in the model's own units
ATOL = 1e-5
DEEPMET_NORM = DeepMETProducer.norm_factor.default
MINIAOD_MODEL_COLLECTIONS = ("JetPNet", "FatJetPNet", "DeepMET", "TauDeepTau")


@dataclass(frozen=True)
class Case:
    """One shipped configuration: its input, how many events, the odd events per call, and the output
    collections a model touches (their values are compared within the tolerance, everything else exactly)."""

    config: str
    input: str | None          # name of the fixture giving the input file (None: the source makes events)
    events: int
    odd: int                   # events per call that divides neither the events nor the chunk size
    chunk_size: int | None     # a chunk size that puts chunk boundaries inside the file (None: not useful)
    model_collections: tuple[str, ...]
    overrides: tuple[str, ...] = ()


#: the Delphes card of the test file made no AK8 jets; its AK4 jets stand in so that pnetAK8 has work
#: (tests/miniaod/test_delphes.py does the same)
AK8_FROM_AK4 = ("source.columns.FatJet={from: Jet, fields: {pt: PT, eta: Eta, phi: Phi, mass: Mass}}",
                "source.columns.FatJetPFCands={references: Jet.Constituents, "
                "targets: [EFlowTrack, EFlowPhoton, EFlowNeutralHadron], index_fields: [jetIdx, pFCandsIdx]}")

CASES = [
    Case("miniaod", "miniaod_file", 24, 7, 10, MINIAOD_MODEL_COLLECTIONS),
    pytest.param(Case("miniaod_cms", "miniaod_file", 24, 7, 10, MINIAOD_MODEL_COLLECTIONS),
                 marks=pytest.mark.shared, id="miniaod_cms"),
    Case("miniaod_delphes", "delphes_file", 10, 7, 4, MINIAOD_MODEL_COLLECTIONS, AK8_FROM_AK4),
    Case("demo_inference", None, 50, 7, 12, ("ToyJet",), ("source.events=50",)),
    # the HitScore, the Michel decisions made from them, and the per-event summary counting both
    Case("protodune", "protodune_file", 3, 2, None, ("HitScore", "HitMichel", "Summary")),
    # tracks are built from the GNN's edge scores: all of it is downstream of a model
    Case("exatrkx", "exatrkx_file", 8, 7, 5, ("Track", "HitTrack", "Matching")),
]


def case_id(case) -> str:
    return case.config if isinstance(case, Case) else None


# -- inputs (the generators and seeds of tests/miniaod, tests/protodune, tests/exatrkx; small) -------------------

@pytest.fixture(scope="session")
def miniaod_file(tmp_path_factory) -> Path:
    """tests/miniaod's small file: 24 events with jets, boosted jets, τs and leptons."""
    from sonic_hep.data.miniaod.generate import generate

    return Path(generate(tmp_path_factory.mktemp("epc-miniaod") / "small.root", 24, seed=SMALL_SEED,
                         process="ttbar,ztautau,wjets"))


@pytest.fixture(scope="session")
def delphes_file() -> Path:
    """Real Delphes 3 output (10 events) from scikit-hep-testdata, as tests/miniaod/test_delphes.py."""
    skhep_testdata = pytest.importorskip("skhep_testdata")
    return Path(skhep_testdata.data_path("uproot-issue513.root"))


@pytest.fixture(scope="session")
def protodune_file(tmp_path_factory) -> Path:
    """Three small-scale ProtoDUNE events (tests/protodune makes two: three give a batch of 2 and one of 1)."""
    from sonic_hep.data.protodune.generate import generate
    from tests.protodune.conftest import EVENT_SEED

    return Path(generate(tmp_path_factory.mktemp("epc-protodune") / "small.root", 3, "small", seed=EVENT_SEED))


@pytest.fixture(scope="session")
def exatrkx_file(tmp_path_factory) -> Path:
    """tests/exatrkx's held-out ACTS sample (8 events, seed 5)."""
    pytest.importorskip("acts", reason="the ACTS simulation needs pyacts (the generators extra)")
    from sonic_hep.data.exatrkx.generate import generate
    from tests.exatrkx.conftest import EVENT_SEED, EVENTS

    return Path(generate(tmp_path_factory.mktemp("epc-exatrkx") / "events.root", EVENTS, seed=EVENT_SEED))


# -- running and comparing ------------------------------------------------------------------------------------------

def load(config: str, inputs: Path | None, output: Path, *overrides: str):
    files = [f"source.files=['{inputs}']"] if inputs is not None else []
    return cfgmod.load(config, [*files, f"output.file='{output}'", "options.progress=false", *overrides])


def run(config: str, inputs: Path | None, output: Path, *overrides: str):
    """Runs a shipped configuration in this process; returns (Process, RunResult)."""
    process = Process(load(config, inputs, output, *overrides))
    return process, process.run(progress=False)


def read(path: Path) -> tuple[int, dict[str, tuple[str, ak.Array]]]:
    """(entries, {branch: (type name, values)}) of the Events tree, branches in file order."""
    with uproot.open(path) as handle:
        tree = handle["Events"]
        return tree.num_entries, {name: (tree[name].typename, tree[name].array(library="ak")) for name in tree.keys()}


def counter_names(branches: dict) -> set[str]:
    return {f"n{name.split('_', 1)[0]}" for name in branches if "_" in name} & set(branches)


def is_model_branch(name: str, model_collections: tuple[str, ...], counters: set[str]) -> bool:
    return name not in counters and (name in model_collections or name.split("_", 1)[0] in model_collections)


def flat(values: ak.Array) -> np.ndarray:
    return ak.to_numpy(ak.flatten(values, axis=None))


def model_difference(name: str, ref: np.ndarray, other: np.ndarray, ref_all: dict) -> np.ndarray:
    """|difference| in the model's own units (see the module docstring)."""
    ref64, other64 = ref.astype(np.float64), other.astype(np.float64)
    if name in ("DeepMET_pt", "DeepMET_px", "DeepMET_py"):
        return np.abs(other64 - ref64) / DEEPMET_NORM
    if name == "DeepMET_phi":  # through px and py: the displacement |Δφ|·pt, in the model's units
        dphi = np.abs(np.angle(np.exp(1j * (other64 - ref64))))
        return dphi * flat(ref_all["DeepMET_pt"][1]).astype(np.float64) / DEEPMET_NORM
    both_nan = np.isnan(ref64) & np.isnan(other64)
    return np.where(both_nan, 0.0, np.abs(other64 - ref64))


def differences(ref_path: Path, other_path: Path, model_collections: tuple[str, ...]) -> list[str]:
    """What differs between two outputs: every problem, one line each (empty: equal)."""
    n_ref, ref = read(ref_path)
    n_other, other = read(other_path)
    problems = []
    if n_ref != n_other:
        return [f"entries {n_ref} vs {n_other}"]
    if set(ref) != set(other):  # the order may differ (sonic merge writes flat branches first)
        return [f"branches only in {ref_path.name}: {sorted(set(ref) - set(other))}, only in {other_path.name}: "
                f"{sorted(set(other) - set(ref))}"]
    counters = counter_names(ref)
    for name, (typename, values) in ref.items():
        other_type, other_values = other[name]
        if typename != other_type:
            problems.append(f"{name}: type {typename} vs {other_type}")
            continue
        if values.ndim > 1 and not ak.all(ak.num(values, axis=1) == ak.num(other_values, axis=1)):
            problems.append(f"{name}: different counts per event")
            continue
        a, b = flat(values), flat(other_values)
        if a.shape != b.shape:
            problems.append(f"{name}: shape {a.shape} vs {b.shape}")
        elif is_model_branch(name, model_collections, counters):
            diff = model_difference(name, a, b, ref)
            if diff.size and not np.max(diff) <= ATOL:
                problems.append(f"{name}: {int(np.count_nonzero(~(diff <= ATOL)))} of {diff.size} values beyond "
                                f"{ATOL:g} (largest {np.max(diff):.3g}; model output)")
        elif a.dtype != b.dtype or a.tobytes() != b.tobytes():
            changed = int(np.count_nonzero(a != b)) if a.dtype == b.dtype else a.size
            problems.append(f"{name}: {changed} of {a.size} values not bit for bit equal (no model touches it)")
    return problems


def module_counts(result) -> dict[str, tuple[int, int, int]]:
    return {m["label"]: (m["visited"], m["passed"], m["failed"]) for m in result.timing.report()["modules"]}


def batches(events: int, events_per_call: int, chunk_size: int) -> list[tuple[int, int]]:
    """The (first, size) of each batch the scheduler makes: chunks cut into batches, never spanning two chunks
    (a chunk is at least one batch long)."""
    chunk_size = max(chunk_size, events_per_call)
    out = []
    for chunk in range(0, events, chunk_size):
        length = min(chunk_size, events - chunk)
        out += [(chunk + start, min(events_per_call, length - start)) for start in range(0, length, events_per_call)]
    return out


# -- 1. every shipped configuration: the same outputs whatever the events per call ----------------------------------

@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_outputs_do_not_depend_on_events_per_call(case: Case, request, tmp_path, monkeypatch):
    if case.config == "miniaod_cms":
        monkeypatch.setenv("SONIC_HEP_CMS_MODELS", str(shared_path("real", "cms-models")))
    inputs = request.getfixturevalue(case.input) if case.input else None
    variants = {"1": ("options.events_per_call=1",),
                str(case.odd): (f"options.events_per_call={case.odd}",),
                "auto": ("options.events_per_call=0",)}
    if case.chunk_size:
        variants[f"{case.odd}-chunks-of-{case.chunk_size}"] = (f"options.events_per_call={case.odd}",
                                                               f"source.chunk_size={case.chunk_size}")
    outputs, counts, problems = {}, {}, []
    for name, overrides in variants.items():
        path = tmp_path / f"{name}.root"
        process = Process(load(case.config, inputs, path, *case.overrides, *overrides))
        if name == "auto" and process.events_per_call in (1, case.odd):
            continue  # the scheduler's choice is a run above (ProtoDUNE: 1 event per call within memory_mb)
        outputs[name] = path
        result = process.run(progress=False)
        assert result.events == case.events, name
        counts[name] = module_counts(result)
        epc = result.timing.events_per_call
        if name != "auto":
            assert epc == int(overrides[0].split("=")[1])
        n_batches = len(batches(case.events, epc, process.config.source.chunk_size))
        for m in result.timing.report()["modules"]:  # columnar: once per batch; per-event: once per event
            columnar = getattr(process.prototypes[m["label"]], "columnar", False)
            expected = n_batches if columnar else m["visited"]
            if m["visited"] == case.events and m["invocations"] != expected:
                problems.append(f"[{name}] module {m['label']} ({'columnar' if columnar else 'per event'}) "
                                f"called {m['invocations']} times, expected {expected} ({n_batches} batches "
                                f"of {case.events} events)")
    reference = outputs.pop("1")
    for name, path in outputs.items():
        if counts[name] != counts["1"]:
            problems.append(f"[{name}] visited/passed/failed per module {counts[name]} != {counts['1']}")
        problems += [f"[events_per_call {name} vs 1] {p}" for p in differences(reference, path, case.model_collections)]
    assert not problems, f"{case.config}:\n" + "\n".join(problems)


def test_batches_helper_cuts_chunks_like_the_scheduler():
    assert batches(24, 7, 100) == [(0, 7), (7, 7), (14, 7), (21, 3)]
    assert batches(24, 7, 10) == [(0, 7), (7, 3), (10, 7), (17, 3), (20, 4)]
    assert batches(24, 7, 5) == [(0, 7), (7, 7), (14, 7), (21, 3)]  # a chunk is at least one batch


# -- 2. SONIC: the client's counters are what the batches carry; SONIC equals direct --------------------------------

#: small max_batch_size for the copy of data/models/miniaod, so that batches of 7 events are split
SMALL_MAX_BATCH = {"miniaod_particlenet_ak4": 16, "miniaod_particlenet_ak8": 1, "miniaod_deepmet": 3,
                   "miniaod_deeptau": 2}
#: per model: the input column whose entries per event are the model's rows (None: one row per event)
ROWS_FROM = {"miniaod_particlenet_ak4": "nJet", "miniaod_particlenet_ak8": "nFatJet", "miniaod_deepmet": None,
             "miniaod_deeptau": "nTau"}
SONIC_EVENTS_PER_CALL = 7
#: models whose producer splits a batch into requests itself, by jet length
LENGTH_ORDERED = {"miniaod_particlenet_ak4", "miniaod_particlenet_ak8"}


def small_batch_repository(target: Path) -> Path:
    """data/models/miniaod copied with the max_batch_size above (preferred batch sizes clamped to it)."""
    shutil.copytree(PROJECT / "data" / "models" / "miniaod", target)
    for model, limit in SMALL_MAX_BATCH.items():
        config = target / model / "config.pbtxt"
        text = re.sub(r"max_batch_size: \d+", f"max_batch_size: {limit}", config.read_text())
        text = re.sub(r"preferred_batch_size: (\d+)", lambda m: f"preferred_batch_size: {min(int(m[1]), limit)}", text)
        config.write_text(text)
    return target


def expected_counters(inputs: Path, events_per_call: int, chunk_size: int, max_batch: dict[str, int]) -> dict:
    """Per model: calls (batches with rows), requests (Σ ⌈rows / max_batch_size⌉) and rows, from plain uproot."""
    with uproot.open(inputs) as handle:
        tree = handle["Events"]
        per_event = {model: (np.ones(tree.num_entries, dtype=np.int64) if column is None else
                             tree[column].array(library="np").astype(np.int64))
                     for model, column in ROWS_FROM.items()}
        events = tree.num_entries
    out = {}
    for model, rows in per_event.items():
        in_batches = [int(rows[first:first + size].sum())
                      for first, size in batches(events, events_per_call, chunk_size)]
        requests = sum(math.ceil(r / max_batch[model]) for r in in_batches)
        # the ParticleNet taggers order a batch's jets by length and send each request as its own call (padded
        # to its own longest jet); the other producers make one call per batch, which the client splits
        calls = requests if model in LENGTH_ORDERED else sum(1 for r in in_batches if r)
        out[model] = {"calls": calls, "rows": sum(in_batches), "requests": requests}
    return out


@pytest.mark.triton
def test_sonic_requests_are_what_the_batches_carry(miniaod_file, tmp_path):
    from sonic_hep.framework.inference.serving.server import TritonServer

    repository = small_batch_repository(tmp_path / "models")
    expected = expected_counters(miniaod_file, SONIC_EVENTS_PER_CALL, 100, SMALL_MAX_BATCH)
    assert any(e["requests"] > e["calls"] for e in expected.values())  # some batch is split by the client
    assert any(e["requests"] > 1 for m, e in expected.items() if m in LENGTH_ORDERED)  # and some by length
    assert all(e["rows"] for e in expected.values())
    outputs, counters = {}, {}
    with TritonServer([str(repository)], workdir=tmp_path / "server") as server:
        for mode in ("direct", "sonic"):
            outputs[mode] = tmp_path / f"{mode}.root"
            _, result = run("miniaod", miniaod_file, outputs[mode], f"options.events_per_call={SONIC_EVENTS_PER_CALL}",
                            f"services.inference.repository=['{repository}']", f"services.inference.mode={mode}",
                            f"services.inference.servers=['{server.grpc_url}']", "services.inference.fallback=false")
            section = result.timing.report()["inference"]
            assert section["mode"] == mode
            counters[mode] = {model: {key: c[key] for key in ("calls", "requests", "rows")}
                              for model, c in section["models"].items()}
    for mode in ("sonic", "direct"):  # both modes send exactly the same requests
        assert counters[mode] == expected, f"{mode}: client counters {counters[mode]}, batches carry {expected}"
    problems = differences(outputs["direct"], outputs["sonic"], MINIAOD_MODEL_COLLECTIONS)
    assert not problems, "SONIC vs direct (same events per call):\n" + "\n".join(problems)


# -- 3. grid: jobs over entry ranges not aligned to the batches, merged, equal one single run -----------------------

GRID_EVENTS_PER_JOB = 10  # with 7 events per call: jobs' batches 7+3, 7+3, 4; the single run's 7, 7, 7, 3


def test_jobs_over_unaligned_entry_ranges_merge_to_the_single_run(miniaod_file, tmp_path):
    from sonic_hep.workflows.grid.merge import merge
    from sonic_hep.workflows.grid.task import Task
    from tests.grid.conftest import submit_and_wait

    overrides = [f"options.events_per_call={SONIC_EVENTS_PER_CALL}", "options.streams=2", "options.threads=1"]
    config = tmp_path / "miniaod.yaml"
    shutil.copy(PROJECT / "configs" / "miniaod.yaml", config)
    statuses = submit_and_wait(config, tmp_path / "task", [miniaod_file], timeout=240, overrides=overrides,
                               events_per_job=GRID_EVENTS_PER_JOB, max_running=2)
    assert [s.state for s in statuses] == ["done"] * math.ceil(24 / GRID_EVENTS_PER_JOB), \
        [(s.state, s.reason) for s in statuses]
    timings = [json.loads(p.read_text()) for p in sorted((tmp_path / "task").glob("jobs/*/timing.json"))]
    assert [(t["events"], t["events_per_call"]) for t in timings] == [(10, 7), (10, 7), (4, 7)]
    merged = tmp_path / "merged.root"
    assert merge(Task(tmp_path / "task"), merged) == 24
    single = tmp_path / "single.root"
    run("miniaod", miniaod_file, single, *overrides)
    problems = differences(single, merged, MINIAOD_MODEL_COLLECTIONS)
    assert not problems, "merged jobs vs one run:\n" + "\n".join(problems)
