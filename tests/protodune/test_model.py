"""EmTrkMichelId: the architecture, the committed ONNX file and repositories, and its torch copy."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from sonic_hep.data.protodune.model import PARAMETERS, Weights, quantize_columns, to_onnx, weights_from_onnx
from sonic_hep.framework.inference.repository import ModelRepository

from tests.protodune.conftest import CPU_REPOSITORY, GPU_REPOSITORY

ONNX_FILE = CPU_REPOSITORY / "emtrkmichelid" / "1" / "model.onnx"


def random_patches(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    patches = rng.integers(0, 255, (n, 48, 48, 1)).astype(np.uint8)
    patches[rng.uniform(size=patches.shape) < 0.8] = 0  # mostly empty, like real patches
    return patches


def test_committed_model_is_the_seed_architecture():
    model = onnx.load(str(ONNX_FILE))
    weights = weights_from_onnx(model)
    assert weights.count() == PARAMETERS == 11_900_420
    assert weights.conv_w.shape == (48, 1, 5, 5) and weights.dense1_w.shape == (92_928, 128)
    assert weights.dense2_w.shape == (128, 32) and weights.em_w.shape == (32, 3) and weights.michel_w.shape == (32, 1)
    (inp,) = model.graph.input
    assert inp.name == "patches" and inp.type.tensor_type.elem_type == onnx.TensorProto.UINT8
    assert [o.name for o in model.graph.output] == ["em_trk_none", "michel"]
    assert ONNX_FILE.stat().st_size < 13e6  # int8 Dense-128 weights: the repository stays small


def test_int8_weights_are_close_to_float():
    w = Weights.random(1).dense1_w
    q, scale = quantize_columns(w)
    assert q.dtype == np.int8 and scale.shape == (128,)
    error = np.abs(q * scale - w).max(axis=0) / np.abs(w).max(axis=0)
    assert np.all(error <= 0.5 / 127 + 1e-6)


def test_outputs_are_probabilities():
    session = ort.InferenceSession(str(ONNX_FILE), providers=["CPUExecutionProvider"])
    em, michel = session.run(None, {"patches": random_patches(16)})
    assert em.shape == (16, 3) and michel.shape == (16, 1)
    assert np.allclose(em.sum(axis=1), 1, atol=1e-5) and np.all((michel >= 0) & (michel <= 1))


def test_quantised_graph_matches_float_graph():
    weights = Weights.random(2)
    patches = random_patches(8, 1)
    run = lambda model: ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"patches": patches})  # noqa: E731
    exact, quantised = run(to_onnx(weights, quantize=False)), run(to_onnx(weights))
    assert np.abs(exact[0] - quantised[0]).max() < 0.02


def test_repositories_describe_the_same_model():
    cpu = ModelRepository([CPU_REPOSITORY]).get("emtrkmichelid")
    gpu = ModelRepository([GPU_REPOSITORY]).get("emtrkmichelid")
    cpu.verify_checksums()
    gpu.verify_checksums()  # pins the MD5 of the linked ONNX file and of model.py
    assert cpu.platform == "onnxruntime_onnx" and gpu.platform == "python"
    assert cpu.inputs == gpu.inputs and cpu.outputs == gpu.outputs
    assert cpu.max_batch_size == 1693
    # the GPU entry merges several of a producer's requests into one execution (sonic bench gpu)
    assert gpu.max_batch_size > cpu.max_batch_size and gpu.config_dict["dynamic_batching"] is not None
    assert cpu.labels["em_trk_none"] == ["track", "em", "none"]
    assert (gpu.path / "1" / "model.onnx").resolve() == ONNX_FILE.resolve()


@pytest.mark.parametrize("layout, chunk", [("nchw", 0), ("nhwc", 0), ("nhwc", 7)])
def test_torch_copy_matches_onnxruntime(layout, chunk):
    """The GPU repository's model.py (torch, here on CPU in float32) computes what onnxruntime computes,
    in the ONNX graph's channel-first order and channels-last (the Dense rows permuted at load), whole
    or cut into chunks (7 does not divide the 32 patches)."""
    torch = pytest.importorskip("torch")
    from sonic_hep.workflows.bench._torch_client import load_model_file

    module = load_model_file(GPU_REPOSITORY / "emtrkmichelid" / "1" / "model.py")
    net = module.EmTrkMichelIdTorch.from_onnx(GPU_REPOSITORY / "emtrkmichelid" / "1" / "model.onnx",
                                              layout=layout, chunk=chunk)
    assert net.layout == layout and not net.fused  # cuDNN's fused convolution is for CUDA devices only
    patches = random_patches(32, 2)
    em, michel = net(torch.from_numpy(patches))
    ref_em, ref_michel = ort.InferenceSession(str(ONNX_FILE), providers=["CPUExecutionProvider"]).run(
        None, {"patches": patches})
    assert np.abs(em.numpy() - ref_em).max() < 1e-5
    assert np.abs(michel.numpy() - ref_michel).max() < 1e-5


def test_trainable_torch_model_exports_what_it_computes():
    torch = pytest.importorskip("torch")
    from sonic_hep.data.protodune.model import torch_model, weights_of

    net = torch_model().eval()
    assert sum(p.numel() for p in net.parameters()) == PARAMETERS
    patches = random_patches(8, 3)
    with torch.no_grad():
        em, michel = net(torch.from_numpy(patches))
    onnx_em, onnx_michel = ort.InferenceSession(to_onnx(weights_of(net), quantize=False),
                                                providers=["CPUExecutionProvider"]).run(None, {"patches": patches})
    assert np.abs(em.numpy() - onnx_em).max() < 1e-5 and np.abs(michel.numpy() - onnx_michel).max() < 1e-5


def test_finetune_starts_from_the_onnx_weights():
    """finetune.load_weights puts an ONNX file's weights into the trainable network: it then computes
    what onnxruntime computes on that file (so fine-tuning starts from the shipped model)."""
    torch = pytest.importorskip("torch")
    from sonic_hep.data.protodune.finetune import load_weights
    from sonic_hep.data.protodune.model import torch_model

    net = load_weights(torch_model(), weights_from_onnx(onnx.load(str(ONNX_FILE)))).eval()
    patches = random_patches(8, 4)
    with torch.no_grad():
        em, michel = net(torch.from_numpy(patches))
    ref_em, ref_michel = ort.InferenceSession(str(ONNX_FILE), providers=["CPUExecutionProvider"]).run(
        None, {"patches": patches})
    assert np.abs(em.numpy() - ref_em).max() < 1e-5 and np.abs(michel.numpy() - ref_michel).max() < 1e-5


def test_pin_gpu_onnx_changes_only_the_onnx_checksum(tmp_path):
    """New weights re-pin the GPU entry's ONNX MD5; its model.py pin and settings stay as they are."""
    import hashlib
    import shutil

    from sonic_hep.data.protodune.export import pin_gpu_onnx

    entry = tmp_path / "emtrkmichelid"
    shutil.copytree(GPU_REPOSITORY / "emtrkmichelid", entry, symlinks=False)
    (entry / "1" / "model.onnx").write_bytes(b"other weights")
    before = (entry / "config.pbtxt").read_text().splitlines()
    pin_gpu_onnx(tmp_path)
    after = (entry / "config.pbtxt").read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(before) == len(after) and len(changed) == 1
    assert changed[0][1].strip() == f'value: "{hashlib.md5(b"other weights").hexdigest()}"'


def test_channels_last_rows_match_a_channels_last_flattening():
    """Row r of the permuted matrix multiplies the activation element that a channels-last flattening
    puts at position r: the product equals the channel-first one on any activation."""
    pytest.importorskip("torch")  # the model file imports it (a job's environment needs torch only to retrain)
    from sonic_hep.workflows.bench._torch_client import load_model_file

    module = load_model_file(GPU_REPOSITORY / "emtrkmichelid" / "1" / "model.py")
    rng = np.random.default_rng(5)
    channels, size = 3, 4
    weights = rng.normal(size=(channels * size * size, 2))
    activation = rng.normal(size=(channels, size, size))  # C, H, W
    first = activation.reshape(-1) @ weights
    last = activation.transpose(1, 2, 0).reshape(-1) @ module.channels_last_rows(weights, channels)
    assert np.allclose(first, last)
    assert not np.allclose(activation.transpose(1, 2, 0).reshape(-1) @ weights, first)


def test_shared_memory_mappings_find_a_pool_in_dev_shm():
    """The GPU entry page-locks the python stub's pool where it lies: it finds the pool among the
    process's mappings (a mapping of a file in /dev/shm), with its whole address range."""
    from multiprocessing import shared_memory

    pytest.importorskip("torch")  # the model file imports it
    from sonic_hep.workflows.bench._torch_client import load_model_file

    module = load_model_file(GPU_REPOSITORY / "emtrkmichelid" / "1" / "model.py")
    before = module.shared_memory_mappings()
    pool = shared_memory.SharedMemory(create=True, size=3 * 2**20)
    try:
        address = np.frombuffer(pool.buf, np.uint8).ctypes.data
        new = [r for r in module.shared_memory_mappings() if r not in before]
        assert any(start <= address and address + 3 * 2**20 <= end for start, end in new)
    finally:
        pool.close()
        pool.unlink()


def test_host_waits_are_set_on_the_primary_context_and_failures_reported():
    """``sync: blocking`` reaches the driver as the blocking-sync flag of the instance's device; a
    driver error is reported, not raised (only speed depends on it); an unknown value is an error."""
    torch = pytest.importorskip("torch")  # the model file imports it
    from sonic_hep.workflows.bench._torch_client import load_model_file

    module = load_model_file(GPU_REPOSITORY / "emtrkmichelid" / "1" / "model.py")

    class Driver:
        def __init__(self, fail: str = ""):
            self.calls, self.fail = [], fail

        def __getattr__(self, name):
            def call(*arguments):
                self.calls.append((name, arguments))
                return 999 if name == self.fail else 0
            return call

    driver = Driver()
    assert module.schedule_host_waits(torch.device("cuda:1"), "blocking", driver) is None
    names = [name for name, _ in driver.calls]
    assert names == ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxSetFlags"]
    assert driver.calls[1][1][1].value == 1 and driver.calls[2][1][1].value == 0x04
    assert "cuDeviceGet: CUDA driver error 999" in module.schedule_host_waits(
        torch.device("cuda:0"), "spin", Driver(fail="cuDeviceGet"))
    with pytest.raises(ValueError, match="'yield'"):
        module.schedule_host_waits(torch.device("cuda:0"), "yield", Driver())


def test_on_a_cpu_the_network_runs_short_passes_whatever_the_gpu_chunk():
    """The GPU entry's 16384-patch passes would need ~6 GB of float32 activation per pass on a CPU
    (the fallback server, or direct mode without a GPU): there it runs at most CPU_CHUNK at a time."""
    from sonic_hep.framework.inference.repository import ModelRepository
    pytest.importorskip("torch")  # the model file imports it
    from sonic_hep.workflows.bench._torch_client import load_model_file

    module = load_model_file(GPU_REPOSITORY / "emtrkmichelid" / "1" / "model.py")
    info = ModelRepository([GPU_REPOSITORY]).get("emtrkmichelid")
    assert info.config_dict["parameters"]["chunk"]["string_value"] == "16384"
    net = module.network_from_config(info.path / "1" / "model.onnx", "cpu", info.config_dict)
    assert net.chunk == module.CPU_CHUNK == 1024
    assert module.network_from_config(info.path / "1" / "model.onnx", "cpu", info.config_dict, chunk=64).chunk == 64
