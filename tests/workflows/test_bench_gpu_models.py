"""``sonic bench gpu-models``: the served repository it writes, and a dry run on the CPU with a real Triton server."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from sonic_hep.framework.inference.repository import ModelRepository
from sonic_hep.framework.inference.serving.runtime_repository import runtime_config
from sonic_hep.framework.inference.service import resolve_repository
from sonic_hep.workflows.bench.gpu_models import from_recorded, write_served_repository


def test_served_repository_runs_the_onnx_files_on_gpu_instances_of_the_torch_backend(tmp_path):
    original = ModelRepository([resolve_repository("data/models/miniaod")])
    entries = {name: original.get(name) for name in ("miniaod_deepmet", "miniaod_particlenet_ak4")}
    served = write_served_repository(entries, tmp_path / "repo", max_batch=1024, instances=2, precision="float16")
    for name, before in entries.items():
        info = served.get(name)
        info.verify_checksums()  # the same model file, checked as a server checks it
        assert info.backend == "onnxtorch" and not info.config.platform
        assert info.model_file().resolve() == before.model_file().resolve()
        assert info.config.max_batch_size == 1024
        assert [(g.count, g.kind) for g in info.config.instance_group] == [(2, mc.ModelInstanceGroup.KIND_GPU)]
        assert info.config.HasField("dynamic_batching")
        assert info.config.parameters["precision"].string_value == "float16"
        assert [s.name for s in info.inputs] == [s.name for s in before.inputs]
        # the dry run's CPU server turns the GPU instances into CPU ones
        assert runtime_config(info, "cpu").instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU


def test_recorded_rows_are_cycled_padded_and_checked_against_the_model():
    info = ModelRepository([resolve_repository("data/models/miniaod")]).get("miniaod_particlenet_ak4")
    rng = np.random.default_rng(1)
    recorded = {"pf_points": rng.random((2, 2, 7)), "pf_features": rng.random((2, 20, 7)), "pf_mask": np.ones((2, 1, 7)),
                "sv_points": rng.random((2, 2, 3)), "sv_features": rng.random((2, 11, 3)), "sv_mask": np.ones((2, 1, 3))}
    got = from_recorded(info, 5, recorded)
    # preprocess.json's maximum lengths: 50 particles, 5 SVs; rows 0, 1, 0, 1, 0; zeros after the recorded length
    assert got["pf_features"].shape == (5, 20, 50) and got["sv_mask"].shape == (5, 1, 5)
    assert got["pf_features"].dtype == np.float32
    np.testing.assert_array_equal(got["pf_features"][2, :, :7], recorded["pf_features"][0].astype(np.float32))
    assert not got["pf_features"][:, :, 7:].any() and not got["sv_mask"][:, :, 3:].any()
    recorded["pf_features"] = rng.random((2, 25, 7))  # AK8's 25 features are not AK4's 20
    with pytest.raises(ValueError, match="miniaod_particlenet_ak4.*'pf_features'"):
        from_recorded(info, 1, recorded)


def test_inputs_file_that_is_missing_is_named(sonic_cli, tmp_path):
    result = sonic_cli("bench", "gpu-models", "--out", tmp_path, "--inputs", tmp_path / "nothing.npz")
    assert result.returncode != 0 and "nothing.npz" in result.stderr and "--record-inputs" in result.stderr


def test_unknown_model_is_refused_naming_it(sonic_cli, tmp_path):
    result = sonic_cli("bench", "gpu-models", "--out", tmp_path, "--models", "particlenet_ak4,nope")
    assert result.returncode != 0
    assert "nope" in result.stderr and "particlenet_ak4" in result.stderr


@pytest.mark.triton
@pytest.mark.slow
def test_dry_run_on_cpu_measures_every_mode_and_served_outputs_match(sonic_cli, tmp_path):
    pytest.importorskip("torch")  # the in-process and served torch modes (make install-test installs it where it can)
    out = tmp_path / "bench"
    result = sonic_cli("bench", "gpu-models", "--out", out, "--device", "cpu", "--models", "particlenet_ak4,deepmet",
                       "--batch-sizes", "1,3", "--seconds", "0.05", "--ort-threads", "1", "--in-flight", "2", timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "gpu_models.json").read_text())
    assert report["failures"] == {}
    rows = {(r["model"], r["mode"], r["batch"]): r for r in report["rows"]}
    modes = ("cpu-onnxruntime", "gpu-torch-fp32", "gpu-torch-fp16", "served-gpu")
    assert set(rows) == {(m, mode, b) for m in ("particlenet_ak4", "deepmet") for mode in modes for b in (1, 3)}
    for (model, mode, batch), row in rows.items():
        assert row["inferences_per_s"] > 0 and row["calls"] >= 3
        per_event = report["per_event"][model]
        assert row["events_per_s"] == pytest.approx(row["inferences_per_s"] / per_event)
        if mode != "gpu-torch-fp16":  # fp32 everywhere: onnxruntime's numbers, served or in-process
            assert row["max_abs_diff"] <= 1e-4, (model, mode, batch)
        else:
            assert row["within_tolerance"] == (row["max_abs_diff"] <= report["fp16_tolerance"])
    text = (out / "gpu_models.md").read_text()
    assert "## particlenet_ak4" in text and "## deepmet" in text and report["machine"] in text
    assert (out / "gpu_models.png").stat().st_size > 1000
