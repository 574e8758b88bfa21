"""``sonic bench miniaod``: the per-module table for both modes in one run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sonic_hep.framework.inference.direct import DirectClient
from sonic_hep.framework.inference.repository import ModelRepository
from sonic_hep.framework.inference.service import resolve_repository
from sonic_hep.workflows.bench.miniaod import algorithm


@pytest.mark.triton
def test_bench_gives_per_module_table_for_direct_and_sonic(sonic_cli, small_file, tmp_path):
    result = sonic_cli("bench", "miniaod", "--input", small_file, "--out", tmp_path, check=True)
    report = json.loads((tmp_path / "miniaod.json").read_text())
    modes = list(dict.fromkeys(run["mode"] for run in report["runs"]))  # both backends (native where it builds)
    assert modes == ["direct", "sonic-python", "sonic-native"] or (
        modes == ["direct", "sonic-python"] and "sonic-native" in report["unavailable"])
    for run in report["runs"]:
        assert run["events"] == 24 and run["event_ms"] > 0
        assert [m["label"] for m in run["modules"]] == ["pnetAK4", "pnetAK8", "deepMET", "deepTau"]
        assert all(m["ms_per_event"] > 0 and 0 < m["fraction"] for m in run["modules"])
    # the modes agree at each batch size (a batch may change a padded model's scores: not compared here)
    assert report["outputs_equal_across_modes"], report["mode_comparisons"]
    # CMS's layouts give CMS-like input sizes per event: DeepMET 4500×11 floats, DeepTau ≈ 0.42 MB per τ
    assert report["input_mb"]["deepMET"] == pytest.approx(4500 * 11 * 4 / 1e6)
    assert report["input_mb"]["deepTau"] > report["input_mb"]["pnetAK4"] > report["input_mb"]["pnetAK8"]
    table = (tmp_path / "miniaod.md").read_text()
    assert "| pnetAK4 | BoostedJetTags | miniaod_particlenet_ak4 |" in table and "% of event" in table
    assert "direct@1 ms/evt" in result.stdout and "sonic-python@1 ms/evt" in result.stdout


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


def test_the_client_counts_every_byte_of_batched_and_ragged_requests():
    # the bench's input sizes are the inference client's own byte counters: a batched request counts its
    # array once, ragged entries count each entry's array, however they are grouped into requests
    repository = ModelRepository([resolve_repository("data/models/demo")])
    client = DirectClient(repository)
    try:
        x = np.zeros((3, 16), np.float32)
        client.run("demo_mlp", {"x": x}, ["probs"])
        points = [np.zeros((3, n), np.float32) for n in (5, 5, 7, 3)]
        client.run("demo_points", {"points": points})
        counters = client.statistics()["models"]
    finally:
        client.close()
    assert counters["demo_mlp"]["bytes_sent"] == x.nbytes
    assert counters["demo_points"]["bytes_sent"] == sum(p.nbytes for p in points) == 3 * 20 * 4


def test_direct_jobs_run_as_many_models_at_once_as_they_have_threads(tmp_path):
    """A two-thread direct job may run two onnxruntime calls at once (it was held to one, which queued a
    multi-threaded direct job's models behind each other); ``--param`` still has the last word."""
    import argparse

    from sonic_hep.workflows.bench.miniaod import job_overrides

    args = argparse.Namespace(streams=4, threads=2, param=[])
    overrides = job_overrides("in.root", "direct", tmp_path, args)
    assert "services.inference.workers=2" in overrides and "services.inference.mode=direct" in overrides
    assert "services.inference.mode=sonic" in job_overrides("in.root", "sonic-native", tmp_path, args)
    args.param = ["services.inference.workers=1"]
    assert job_overrides("in.root", "direct", tmp_path, args)[-1] == "services.inference.workers=1"
