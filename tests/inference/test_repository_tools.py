"""Runtime repositories (checksums verified, agents removed) and writing entries for project models."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.data.demo.models import mlp
from sonic_hep.framework.errors import InferenceError
from sonic_hep.framework.inference.serving import runtime_repository
from sonic_hep.framework.inference.direct import DirectClient
from sonic_hep.framework.inference.repository import ModelRepository, config_checksums, parse_config


def test_runtime_copy_drops_agents_keeps_checksums_and_links_files(tmp_path, demo_repository):
    served = runtime_repository.prepare(demo_repository, tmp_path / "runtime", ["demo_mlp"])
    assert [info.name for info in served] == ["demo_mlp"]
    config = parse_config(tmp_path / "runtime" / "demo_mlp" / "config.pbtxt")
    assert not config.HasField("model_repository_agents")
    assert config_checksums(config) == demo_repository.get("demo_mlp").checksums() != {}
    assert (tmp_path / "runtime" / "demo_mlp" / "1").resolve() == (DEMO_REPOSITORY / "demo_mlp" / "1").resolve()
    assert (tmp_path / "runtime" / "demo_mlp" / "probs_labels.txt").read_text().split() == ["b", "c", "uds", "g"]
    assert (DEMO_REPOSITORY / "demo_mlp" / "config.pbtxt").read_text().count("checksum") == 1  # original untouched


def test_a_cpu_server_runs_a_gpu_group_with_at_most_one_instance_per_core():
    """The ProtoDUNE GPU entry's 16 KIND_GPU instances keep an H100 fed; a CPU (fallback) server serving
    it gets one per core at most, and a group that asks for fewer keeps its count. A GPU server keeps all."""
    from pathlib import Path

    from tritonclient.grpc import model_config_pb2 as mc

    project = Path(__file__).resolve().parents[2]
    info = ModelRepository([project / "data" / "models" / "protodune_gpu"]).get("emtrkmichelid")
    assert info.config.instance_group[0].count == 16
    on_cpu = runtime_repository.runtime_config(info, "cpu", cores=2).instance_group[0]
    assert (on_cpu.count, on_cpu.kind) == (2, mc.ModelInstanceGroup.KIND_CPU)
    assert runtime_repository.runtime_config(info, "cpu", cores=64).instance_group[0].count == 16
    assert runtime_repository.runtime_config(info, "gpu").instance_group[0].count == 16


def test_instance_counts_beyond_what_a_machine_runs_are_refused_naming_the_model(tmp_path):
    """An explicit CPU count is served as written up to 8 per core; 10,000 (Triton aborted after ~800) is refused
    before the server starts, naming the model, the count, the bound and the file. GPU groups: 64 per GPU."""
    from tritonclient.grpc import model_config_pb2 as mc

    shutil.copytree(DEMO_REPOSITORY / "demo_sum", tmp_path / "demo_sum")
    info = ModelRepository([tmp_path]).get("demo_sum")
    group = info.config.instance_group[0]
    group.count = 16
    assert runtime_repository.runtime_config(info, "cpu", cores=2).instance_group[0].count == 16  # as written
    group.count = 10000
    with pytest.raises(InferenceError) as refused:
        runtime_repository.runtime_config(info, "cpu", cores=2)
    assert str(refused.value) == ("model 'demo_sum': instance_group count 10000 (KIND_CPU) is more than this server "
                                  "can run: at most 16 (8 per core × 2 cores it may use); lower it in "
                                  f"{tmp_path / 'demo_sum' / 'config.pbtxt'}")
    group.kind, group.count = mc.ModelInstanceGroup.KIND_GPU, 64
    assert runtime_repository.runtime_config(info, "gpu").instance_group[0].count == 64
    assert runtime_repository.runtime_config(info, "cpu", cores=2).instance_group[0].count == 2  # capped, not refused
    group.count = 65
    with pytest.raises(InferenceError, match=r"count 65 \(KIND_GPU\) .* at most 64 \(per GPU\)"):
        runtime_repository.runtime_config(info, "gpu")


def test_a_cpu_server_pinned_to_some_cores_runs_one_gpu_group_instance_per_pinned_core(tmp_path):
    """TritonServer(cpus=...) passes its own cores on: the cap is the server's, not the calling process's."""
    from pathlib import Path

    from sonic_hep.framework.inference.serving.server import TritonServer

    project = Path(__file__).resolve().parents[2]
    server = TritonServer([project / "data" / "models" / "protodune_gpu"], cpus=[0], workdir=tmp_path)
    server._prepare_repository(tmp_path / "runtime")  # what start() serves, without starting it
    config = (tmp_path / "runtime" / "emtrkmichelid" / "config.pbtxt").read_text()
    assert "count: 1\n" in config and "KIND_CPU" in config


def test_a_model_whose_checksum_is_wrong_is_never_served(tmp_path):
    shutil.copytree(DEMO_REPOSITORY / "demo_mlp", tmp_path / "repo" / "demo_mlp")
    (tmp_path / "repo" / "demo_mlp" / "1" / "model.onnx").write_bytes(mlp(seed=99))
    repository = ModelRepository([tmp_path / "repo"])
    with pytest.raises(InferenceError, match=r"model 'demo_mlp': MD5 of .*model.onnx is [0-9a-f]+, config.pbtxt expects"):
        runtime_repository.prepare(repository, tmp_path / "runtime")
    with pytest.raises(InferenceError, match="MD5"):
        DirectClient(repository).run("demo_mlp", {"x": np.zeros((1, 16), np.float32)})


def test_add_model_reads_specs_from_the_onnx_file(tmp_path, sonic_cli, rng):
    onnx_file = tmp_path / "tagger.onnx"
    onnx_file.write_bytes(mlp(n_in=8, hidden=(16,), n_out=4, seed=3))
    (tmp_path / "labels.txt").write_text("b\nc\nuds\ng\n")
    result = sonic_cli("server", "add-model", "--repository", tmp_path / "repo", "--name", "tagger", "--onnx", onnx_file,
                       "--max-batch-size", "64", "--preferred-batch-size", "32", "--instances", "2",
                       "--labels", f"probs={tmp_path / 'labels.txt'}", check=True)
    assert "input x: FP32 [8]" in result.stdout
    info = ModelRepository([tmp_path / "repo"]).get("tagger")
    assert info.max_batch_size == 64 and [s.dims for s in info.inputs] == [(8,)]
    assert list(info.config.dynamic_batching.preferred_batch_size) == [32]
    assert info.config.instance_group[0].count == 2
    assert info.labels == {"probs": ["b", "c", "uds", "g"]}
    out = DirectClient(ModelRepository([tmp_path / "repo"])).run("tagger", {"x": rng.standard_normal((5, 8)).astype(np.float32)})
    np.testing.assert_allclose(out["probs"].sum(axis=1), 1, rtol=1e-5)
