"""``sonic bench miniaod``: the per-module table for both modes in one run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sonic_hep.framework import Process
from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.inference.fake import FakeClient, use_client
from sonic_hep.framework.inference.repository import ModelRepository
from sonic_hep.framework.inference.service import resolve_repository
from sonic_hep.workflows.bench._sent import count_sent, nbytes
from sonic_hep.workflows.bench.miniaod import algorithm


@pytest.mark.triton
def test_bench_gives_per_module_table_for_direct_and_sonic(sonic_cli, small_file, tmp_path):
    result = sonic_cli("bench", "miniaod", "--input", small_file, "--out", tmp_path, check=True)
    report = json.loads((tmp_path / "miniaod.json").read_text())
    modes = [run["mode"] for run in report["runs"]]  # both backends side by side (native where it builds)
    assert modes == ["direct", "sonic-python", "sonic-native"] or (
        modes == ["direct", "sonic-python"] and "sonic-native" in report["unavailable"])
    for run in report["runs"]:
        assert run["events"] == 24 and run["event_ms"] > 0
        assert [m["label"] for m in run["modules"]] == ["pnetAK4", "pnetAK8", "deepMET", "deepTau"]
        assert all(m["ms_per_event"] > 0 and 0 < m["fraction"] for m in run["modules"])
    assert report["outputs_equal"], report["comparison"]
    # CMS's layouts give CMS-like input sizes per event: DeepMET 4500×11 floats, DeepTau ≈ 0.42 MB per τ
    assert report["input_mb"]["deepMET"] == pytest.approx(4500 * 11 * 4 / 1e6)
    assert report["input_mb"]["deepTau"] > report["input_mb"]["pnetAK4"] > report["input_mb"]["pnetAK8"]
    table = (tmp_path / "miniaod.md").read_text()
    assert "| pnetAK4 | BoostedJetTags | miniaod_particlenet_ak4 |" in table and "% of event" in table
    assert "direct ms/evt" in result.stdout and "sonic-python ms/evt" in result.stdout


def test_input_size_is_what_the_producers_send_in_the_run(sonic_cli, small_file, tmp_path):
    """Counted at the producers' own inference calls, so any configuration works, including producers the
    bench never names (the demo's ToyTagger), and the table names algorithms without a list of classes."""
    sonic_cli("bench", "miniaod", "--input", small_file, "--modes", "direct", "--out", tmp_path / "cms", check=True)
    report = json.loads((tmp_path / "cms" / "miniaod.json").read_text())
    assert report["input_mb"]["deepMET"] == pytest.approx(4500 * 11 * 4 / 1e6)  # one [1, 4500, 8|1] ×4 per event
    assert report["input_mb"]["deepTau"] > report["input_mb"]["pnetAK4"] > report["input_mb"]["pnetAK8"] > 0
    sonic_cli("bench", "miniaod", "--input", small_file, "--modes", "direct", "--config", "demo_inference",
              "-p", "source.events=6", "--out", tmp_path / "demo", check=True)
    demo = json.loads((tmp_path / "demo" / "miniaod.json").read_text())
    assert demo["models"]["tagger"] == "demo_mlp"  # the module's default model, not only a configured one
    assert demo["input_mb"]["tagger"] > 0 and demo["input_mb"]["toyJets"] == 0
    assert demo["runs"][0]["modules"][1]["inference_ms"] > 0
    assert [algorithm(t) for t in ("ParticleNetTagger", "DeepMETProducer", "ToyJets", "Producer")] == \
        ["ParticleNet", "DeepMET", "ToyJets", "Producer"]


def test_count_sent_sees_batched_and_ragged_requests_and_keeps_the_real_client(tmp_path):
    config = cfgmod.load("demo_inference", ["source.events=5", "options.streams=1", "options.progress=false",
                                            f"output.file='{tmp_path / 'o.root'}'"])
    process = Process(config)
    demo = ModelRepository([resolve_repository("data/models/demo")]).get("demo_mlp")
    client = FakeClient().add(demo, lambda x: {"probs": x["x"][:, :4], "logits": x["x"][:, 4:8]})
    use_client(process, client)
    counting = count_sent(process)
    assert counting is not None and counting.sent == {}  # nothing starts before the job
    process.run(progress=False)
    sent = sum(a.nbytes for _, request in client.requests for a in request.values())
    assert counting.sent["demo_mlp"] == sent > 0  # every byte the producer handed to the (real) client
    assert client.closed  # the real service still ends the job
    assert nbytes({"x": [np.zeros(3, "f4"), np.zeros(5, "f4")], "y": np.zeros((2, 2), "f8")}) == 8 * 4 + 4 * 8
