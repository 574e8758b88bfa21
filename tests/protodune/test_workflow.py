"""The ProtoDUNE job end to end: ROOT events → patches → EmTrkMichelId (direct and SONIC) → ROOT scores."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import uproot

from sonic_hep.data.protodune.dataset import simulate
from sonic_hep.framework import Process
from sonic_hep.framework import config as cfgmod
from sonic_hep.modules.protodune.metrics import MichelRates, classification_metrics

from tests.protodune.conftest import CPU_REPOSITORY, HELDOUT_SEED

SCORES = ("track", "em", "none", "michel")


def run_job(small_file, out_path, *overrides):
    cfg = cfgmod.load("protodune", [f"source.files=[{small_file}]", f"output.file={out_path}",
                                    "options.progress=false", *overrides])
    result = Process(cfg).run(progress=False)
    with uproot.open(out_path) as f:
        arrays = f["Events"].arrays(library="np")
    return result, arrays


@pytest.fixture(scope="module")
def direct_run(small_file, tmp_path_factory):
    return run_job(small_file, tmp_path_factory.mktemp("direct") / "scores.root", "emtrkmichel.batch_size=235")


def test_direct_job_scores_every_hit(direct_run, small_file):
    result, out = direct_run
    assert result.events == result.written == 2
    with uproot.open(small_file) as f:
        n_hits = f["Events"]["nHit"].array(library="np")
    assert np.array_equal(out["nHitScore"], n_hits)
    assert [len(m) for m in out["HitMichel"]] == list(n_hits)  # MichelHits: one combined score per hit
    assert all(np.all((m >= 0) & (m <= 1)) for m in out["HitMichel"])
    assert np.array_equal(out["Summary_n_michel"], [int(np.sum(m > 0.5)) for m in out["HitMichel"]])
    for i in range(2):
        em = np.stack([out[f"HitScore_{k}"][i] for k in ("track", "em", "none")], axis=1)
        assert np.allclose(em.sum(axis=1), 1, atol=1e-5)
    assert np.array_equal(out["Summary_n_hits"], n_hits)
    assert np.array_equal(out["Summary_n_track"] + out["Summary_n_em"] + out["Summary_n_none"], n_hits)
    timing = {m["label"]: m for m in result.timing.report()["modules"]}
    assert timing["patches"]["calls"] == 2 and timing["emtrkmichel"]["calls"] == 2
    requests = result.timing.report()["inference"]["models"]["emtrkmichelid"]["requests"]
    assert requests == sum(-(-int(n) // 235) for n in n_hits)  # batch_size 235: ceil(hits / 235) per event


def test_small_events_summary_has_no_nan_and_says_their_michel_efficiency_is_undefined(direct_run, small_file):
    """The two small events (random stream 5) hold no true Michel hit: their Summary gives the counts and -1 for
    the efficiency, never NaN, and the rates over the job say "undefined" rather than a number."""
    _, out = direct_run
    summary = {k: np.asarray(v, dtype=float) for k, v in out.items() if k.startswith("Summary_")}
    assert summary and not any(np.isnan(v).any() for v in summary.values())
    with uproot.open(small_file) as f:
        true = [int(np.sum(m)) for m in f["Events"]["Hit_michel"].array(library="np")]
    assert summary["Summary_n_michel_true"].tolist() == true == [0, 0]
    assert summary["Summary_michel_efficiency"].tolist() == [-1.0, -1.0]
    rates = MichelRates.from_summary(out)
    assert rates.true == 0 and rates.efficiency is None and "efficiency undefined" in rates.describe()


@pytest.mark.triton
def test_sonic_equals_direct(direct_run, small_file, tmp_path):
    """SONIC (a local Triton server started by the job, patches through shared memory) gives the
    same scores as direct onnxruntime within 1e-5, and so the same MichelHits scores (within 1e-4)."""
    _, direct = direct_run
    result, sonic = run_job(small_file, tmp_path / "sonic.root", "services.inference.mode=sonic",
                            "emtrkmichel.batch_size=1693")
    assert result.timing.report()["inference"]["mode"] == "sonic"
    for name in SCORES:
        for i in range(2):
            assert np.abs(sonic[f"HitScore_{name}"][i] - direct[f"HitScore_{name}"][i]).max() <= 1e-5
    for i in range(2):  # downstream of inference, MichelHits agrees as well
        assert np.abs(sonic["HitMichel"][i] - direct["HitMichel"][i]).max() <= 1e-4


@pytest.mark.parametrize("content", ["beam and cosmics", "cosmics only"])
def test_classifier_beats_chance_on_heldout_events(small_simulation, content):
    """Events from a random stream the training never saw: tracks and showers both recognised well
    above chance, with beam showers in the event and with only cosmic muons (whose EM activity is
    delta rays and Michel electrons). The committed model's numbers are in modules/protodune/README.md."""
    import onnxruntime as ort

    sim, events = small_simulation, 3
    if content == "cosmics only":
        sim, events = replace(sim, scenario=replace(sim.scenario, beam=False, halo=0.0, cosmics=8.0)), 8
    sample = simulate(sim, HELDOUT_SEED, range(events))
    session = ort.InferenceSession(str(CPU_REPOSITORY / "emtrkmichelid" / "1" / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    em, michel = zip(*(session.run(None, {"patches": sample.patches[lo:lo + 1693]})
                       for lo in range(0, len(sample), 1693)))
    metrics = classification_metrics(np.concatenate(em), np.concatenate(michel)[:, 0], sample.truth, sample.michel)
    print(content, metrics)
    assert np.sum(sample.truth == 1) > 100  # enough shower hits to measure
    assert metrics["track_vs_shower_balanced_accuracy"] > 0.7  # chance: 0.5
    assert min(metrics["track_efficiency"], metrics["shower_efficiency"]) > 0.55
