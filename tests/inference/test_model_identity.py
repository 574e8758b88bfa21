"""The right model or none: a server is used for a model only if it serves the files of the job's own
repository, compared by the MD5 sums the server reports; ``sonic server checksum`` declares them."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest
from google.protobuf import text_format

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.data.demo.models import write_mlp
from sonic_hep.framework.errors import InferenceError
from sonic_hep.framework.inference.fake import FakeServer, constant
from sonic_hep.framework.inference.model_digest import add_checksums, digest, file_digests
from sonic_hep.framework.inference.repository import ModelRepository, config_checksums, load_model, parse_config
from sonic_hep.framework.inference.serving.runtime_repository import runtime_config
from sonic_hep.framework.inference.sonic.servers import ServerPool, ServerState
from sonic_hep.framework.inference.triton_errors import NoServerError

from .conftest import sonic_client

X = np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)


def _without_checksums(model_dir):
    """Drops the checksum block, as many sites' repositories are written."""
    config = parse_config(model_dir / "config.pbtxt")
    config.ClearField("model_repository_agents")
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(config))


@pytest.fixture
def retrained(tmp_path):
    """``demo_mlp`` with other weights under the same name, and no checksum block to give it away."""
    write_mlp(tmp_path / "repo", seed=7)
    _without_checksums(tmp_path / "repo" / "demo_mlp")
    return ModelRepository([tmp_path / "repo"])


def test_a_server_with_other_weights_under_the_name_is_passed_over(demo_server, retrained, caplog):
    """The job's repository holds another demo_mlp than the server: no answer is taken from it, the
    warning names the model, the server and both digests, and without fallback the job fails in one line."""
    client = sonic_client([demo_server.grpc_url], repository=retrained)
    try:
        with caplog.at_level(logging.WARNING), pytest.raises(NoServerError) as failed:
            client.infer("demo_mlp", {"x": X}).result(timeout=60)
    finally:
        client.close()
    ours = digest(file_digests(retrained.get("demo_mlp")))
    theirs = digest(file_digests(ModelRepository([DEMO_REPOSITORY]).get("demo_mlp")))
    assert ours != theirs
    warning = next(r.getMessage() for r in caplog.records if "passed over" in r.getMessage())
    for part in ("'demo_mlp'", demo_server.grpc_url, ours, theirs):
        assert part in warning
    message = str(failed.value)
    assert "\n" not in message and demo_server.grpc_url in message and ours in message


def test_the_same_files_without_a_checksum_block_are_accepted(demo_server, tmp_path):
    """A copy of the served model whose config declares no sums is still recognised: the sums are
    computed from its files."""
    shutil.copytree(DEMO_REPOSITORY / "demo_mlp", tmp_path / "repo" / "demo_mlp")
    _without_checksums(tmp_path / "repo" / "demo_mlp")
    client = sonic_client([demo_server.grpc_url], repository=ModelRepository([tmp_path / "repo"]))
    try:
        answer = client.infer("demo_mlp", {"x": X}).result(timeout=60)
    finally:
        client.close()
    assert answer["probs"].shape == (4, 4)


def test_the_fallback_serves_the_jobs_own_model_when_the_server_has_another(demo_server, retrained, tmp_path):
    """The only server has other weights: the job's own copy answers, through its fallback server."""
    from sonic_hep.framework.inference.direct import DirectClient

    client = sonic_client([demo_server.grpc_url], repository=retrained, fallback=True)
    client.pool.fallback_options = {"workdir": tmp_path / "fallback"}
    try:
        answer = client.infer("demo_mlp", {"x": X}).result(timeout=120)
        served = client.counters.as_dict()["demo_mlp"]["servers"]
    finally:
        client.close()
    assert demo_server.grpc_url not in served and len(served) == 1
    direct = DirectClient(retrained)
    try:
        expected = direct.infer("demo_mlp", {"x": X}).result(timeout=60)
    finally:
        direct.close()
    np.testing.assert_allclose(answer["probs"], expected["probs"], rtol=1e-5, atol=1e-6)


def _pool_with(server: FakeServer, repository: ModelRepository) -> ServerPool:
    pool = ServerPool([], repository=repository, fallback=False, refresh_s=1e9)
    pool.states = [ServerState(server, models=dict.fromkeys(server.models, "1"))]
    return pool


def test_a_server_that_reports_no_checksums_is_passed_over(tmp_path):
    """A server whose config carries no sums cannot show which model it serves."""
    write_mlp(tmp_path / "repo")
    repository = ModelRepository([tmp_path / "repo"])
    info = load_model(tmp_path / "repo" / "demo_mlp")
    info.config.ClearField("model_repository_agents")
    pool = _pool_with(FakeServer("10.0.0.1:8001", {"demo_mlp": (info, constant({"probs": np.zeros(4, "f4")}))}),
                      repository)
    with pytest.raises(NoServerError, match=r"10\.0\.0\.1:8001.*reports no checksums.*sonic server checksum"):
        pool.choose("demo_mlp")


def test_an_ensemble_is_checked_step_by_step(tmp_path):
    """An ensemble has no files of its own: a server whose step differs is passed over for the ensemble."""
    write_mlp(tmp_path / "repo", name="step")
    ensemble = tmp_path / "repo" / "chain"
    (ensemble / "1").mkdir(parents=True)
    (ensemble / "config.pbtxt").write_text(
        'name: "chain"\nplatform: "ensemble"\nmax_batch_size: 128\n'
        'input { name: "x" data_type: TYPE_FP32 dims: 16 }\noutput { name: "probs" data_type: TYPE_FP32 dims: 4 }\n'
        'ensemble_scheduling { step { model_name: "step" model_version: -1 input_map { key: "x" value: "x" } '
        'output_map { key: "probs" value: "probs" } } }\n')
    repository = ModelRepository([tmp_path / "repo"])
    other = load_model(write_mlp(tmp_path / "other", name="step", seed=9))
    compute = constant({"probs": np.zeros(4, "f4")})
    pool = _pool_with(FakeServer("10.0.0.2:8001", {"chain": (repository.get("chain"), compute),
                                                   "step": (other, compute)}), repository)
    with pytest.raises(NoServerError, match=r"ensemble 'chain'.*model 'step'.*is not the local"):
        pool.choose("chain")
    good = _pool_with(FakeServer("10.0.0.3:8001", {"chain": (repository.get("chain"), compute),
                                                   "step": (repository.get("step"), compute)}), repository)
    assert good.choose("chain").address == "10.0.0.3:8001"


def test_servers_the_project_starts_report_the_sums_of_undeclared_files(tmp_path):
    write_mlp(tmp_path / "repo")
    _without_checksums(tmp_path / "repo" / "demo_mlp")
    info = load_model(tmp_path / "repo" / "demo_mlp")
    assert info.checksums() == {}
    sums = config_checksums(runtime_config(info))
    assert list(sums) == ["1/model.onnx"] and sums == file_digests(info)


def test_python_caches_beside_a_model_are_not_part_of_it(tmp_path):
    write_mlp(tmp_path / "repo")
    info = load_model(tmp_path / "repo" / "demo_mlp")
    before = file_digests(info)
    (tmp_path / "repo" / "demo_mlp" / "1" / "__pycache__").mkdir()
    (tmp_path / "repo" / "demo_mlp" / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0" * 16)
    assert file_digests(info) == before


def test_sonic_server_checksum_declares_sums_once_and_refuses_a_changed_file(tmp_path, sonic_cli):
    model_dir = write_mlp(tmp_path / "repo")
    _without_checksums(model_dir)
    (model_dir / "config.pbtxt").write_text("# written by hand\n" + (model_dir / "config.pbtxt").read_text())
    first = sonic_cli("server", "checksum", str(tmp_path / "repo"))
    assert first.returncode == 0, first.stderr
    assert "demo_mlp: declared 1 file(s): 1/model.onnx" in first.stdout
    text = (model_dir / "config.pbtxt").read_text()
    assert text.startswith("# written by hand")  # appended, the author's text kept
    info = load_model(model_dir)
    assert info.checksums() == file_digests(info)
    second = sonic_cli("server", "checksum", str(tmp_path / "repo"))
    assert "demo_mlp: checksums present and correct" in second.stdout
    with open(model_dir / "1" / "model.onnx", "ab") as model:
        model.write(b"\0")
    changed = sonic_cli("server", "checksum", str(tmp_path / "repo"))
    assert changed.returncode == 1
    assert changed.stderr.strip().count("\n") == 0 and "model.onnx" in changed.stderr


def test_add_checksums_adds_to_an_existing_block(tmp_path):
    """A config that declares some files gets the others added to the same block (one block per config)."""
    model_dir = write_mlp(tmp_path / "repo")
    (model_dir / "1" / "extra.bin").write_bytes(b"weights")
    info = load_model(model_dir)
    assert add_checksums(info) == ["1/extra.bin"]
    assert set(load_model(model_dir).checksums()) == {"1/model.onnx", "1/extra.bin"}
    (model_dir / "1" / "extra.bin").write_bytes(b"other")
    with pytest.raises(InferenceError, match="extra.bin"):
        add_checksums(load_model(model_dir))
