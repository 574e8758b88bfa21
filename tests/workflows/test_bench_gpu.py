"""``sonic bench gpu``: its accounting of Triton's statistics and of the model's stage log, the served
copies it writes, the direct stages, and a dry run on the CPU with a real Triton server."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from sonic_hep.framework.inference.repository import ModelRepository
from sonic_hep.workflows.bench import gpu


def test_server_settings_are_parsed_and_bad_ones_named():
    settings = gpu.parse_servers(["8:pageable", "2:pinned"], 16384)
    assert settings == {"8x pageable": {"instances": 8, "staging": "pageable", "max_batch": 16384},
                        "2x pinned": {"instances": 2, "staging": "pinned", "max_batch": 16384}}
    for bad in ("0:pinned", "two:pinned", "2:mapped", "2"):
        with pytest.raises(SystemExit, match=bad):
            gpu.parse_servers([bad], 16384)


def test_network_overrides_reach_direct_and_served_alike():
    args = argparse.Namespace(chunk=16384, sync=None)
    overrides = gpu.network_overrides(args)
    assert overrides == {"chunk": 16384}
    assert gpu.parse_servers(["4:registered"], 16384, overrides)["4x registered"]["chunk"] == 16384
    assert "sync" not in gpu.parse_servers(["4:registered"], 16384, overrides)["4x registered"]


def test_the_summary_takes_the_median_of_repeats_and_the_best_process_count():
    points = [{"processes": 4, "events_per_s": r} for r in (60.0, 90.0, 62.0)] + \
             [{"processes": 8, "events_per_s": r} for r in (64.0, 65.0)]
    assert gpu.best_median(points) == 64.5  # 4 processes: median 62, not its outlier 90
    assert gpu.best_median([]) == 0.0


def test_served_copy_has_the_settings_and_the_shipped_files(tmp_path):
    root = gpu.server_repository(tmp_path, 3, 4096, {"staging": "pinned", "layout": "nchw"}, "KIND_CPU")
    info = ModelRepository([root]).get(gpu.MODEL)
    shipped = ModelRepository([gpu.REPOSITORY]).get(gpu.MODEL)
    assert [(g.count, g.kind) for g in info.config.instance_group] == [(3, mc.ModelInstanceGroup.KIND_CPU)]
    assert info.config.max_batch_size == 4096
    assert info.config.parameters["staging"].string_value == "pinned"
    assert info.config.parameters["layout"].string_value == "nchw"
    assert info.config.parameters["precision"].string_value == shipped.config.parameters["precision"].string_value
    assert info.inputs == shipped.inputs and info.outputs == shipped.outputs
    for name in ("1/model.py", "1/model.onnx"):
        assert (info.path / name).read_bytes() == (shipped.path / name).read_bytes()


def _stats(executions: int, requests: int, **ns: int) -> dict:
    inference = {"success": {"count": requests}}
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        inference[key] = {"count": requests, "ns": ns.get(key, 0)}
    return {"model_stats": [{"execution_count": executions, "inference_stats": inference}]}


def test_statistics_delta_is_the_difference_of_two_snapshots():
    before = _stats(2, 10, queue=5, compute_infer=100)
    after = _stats(5, 37, queue=50, compute_infer=1000, compute_input=7)
    assert gpu.statistics_delta(before, after) == {"executions": 3, "requests": 27, "queue_ns": 45,
                                                   "compute_input_ns": 7, "compute_infer_ns": 900,
                                                   "compute_output_ns": 0}


def test_server_stages_are_per_event_and_the_overhead_is_what_the_model_does_not_account_for(tmp_path):
    """Two executions of 100 rows each make one event of 200 patches; Triton booked 50 ms of execution
    per event, the model logged 30 ms of stages: 20 ms are the python backend's own."""
    log = tmp_path / "stages.jsonl"
    line = {"pid": 1, "start": 0.0, "inputs_s": 0.001, "h2d_s": 0.004, "forward_s": 0.009, "d2h_and_responses_s": 0.001,
            "requests": 2, "rows": 100}
    log.write_text("\n".join(json.dumps({**line, "start": float(i)}) for i in range(2)) + "\n")
    point = {"rows_per_execution": 100.0, "executions": 2.0, "events": 1, "compute_infer_ms_per_event": 50.0}
    stages = gpu.server_stages(log, point)
    assert stages["inputs_ms_per_event"] == pytest.approx(2.0)
    assert stages["h2d_ms_per_event"] == pytest.approx(8.0)
    assert stages["forward_ms_per_event"] == pytest.approx(18.0)
    assert stages["python_backend_overhead_ms_per_event"] == pytest.approx(20.0)
    assert len(stages["timeline"]) == 2


def test_direct_stages_add_up_and_run_every_stage_on_the_cpu():
    pytest.importorskip("torch")
    net, staging = gpu.build(gpu.load_network_module(), "cpu", {"chunk": 16})
    assert staging is None  # page-locked staging is for CUDA devices
    patches = np.random.default_rng(3).integers(0, 256, (40, 48, 48, 1), dtype=np.uint8)
    stages = gpu.direct_stages(net, staging, patches, repeats=1)
    assert stages["total_ms"] == pytest.approx(sum(stages[f"{k}_ms"] for k in gpu.STAGES))
    assert all(stages[f"{k}_ms"] > 0 for k in ("convolve", "dense1"))
    assert [name for name, _, _ in stages["timeline"]].count("convolve") == 3  # 40 patches in chunks of 16


@pytest.mark.triton
@pytest.mark.slow
def test_dry_run_on_the_cpu_with_a_real_server(tmp_path):
    """Every step on the CPU: one small event, one direct process, one client against a real Triton
    server serving the GPU entry's model.py on CPU instances, the stage log, the score check."""
    pytest.importorskip("torch")
    from sonic_hep.workflows.cli import main

    out = tmp_path / "out"
    rc = main(["bench", "gpu", "--device", "cpu", "--scale", "small", "--events", "1", "--processes", "1",
               "--clients", "1", "--seconds", "1", "--servers", "1:pageable", "--python-shm-mb", "16",
               "--repeat", "2", "--chunk", "64", "--out", str(out)])
    report = json.loads((out / "gpu.json").read_text())
    assert rc == 0 and not report["failures"]
    assert report["direct"]["optimised"][0]["events"] > 0
    assert len(report["direct"]["optimised"]) == 2  # --repeat 2: each point twice
    (server,) = report["servers"]
    assert len(server["points"]) == 2 and server["chunk"] == 64
    assert all(p["events"] > 0 and p["requests"] > 0 for p in server["points"])
    assert all(p["cpu_busy_cores"] > 0 for p in server["points"])
    assert server["stages"]["timeline"], "the stage-log pass logged no execution"
    assert max(report["scores"].values()) < 1e-4  # float32 on the CPU: direct and served equal onnxruntime
    for name in ("gpu.md", "gpu.png", "gpu_timeline.png"):
        assert (out / name).stat().st_size > 0
