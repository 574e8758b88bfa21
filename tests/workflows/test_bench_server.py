"""``sonic bench server``: prepared gRPC bodies, and the benchmark against a real server.

The bodies are checked by decoding them back with tritonclient's protobuf class; the benchmark runs end
to end on a few hundred requests and its JSON must agree with the server's own statistics. A request the
server refuses still looks like a success to h2load (HTTP 200, the gRPC error in the trailers): the
benchmark must notice it from the statistics.
"""

from __future__ import annotations

import json
import shutil
import statistics

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.framework.inference.repository import parse_config
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.workflows.bench import server as bench
from sonic_hep.workflows.bench._grpc_bodies import body, frame, infer_request, unframe

needs_h2load = pytest.mark.skipif(shutil.which("h2load") is None,
                                  reason="h2load is not installed (apt-get install nghttp2-client)")


def test_body_decodes_back_to_the_request():
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    ids = np.array([[7, -1]], dtype=np.int64)
    framed = body("demo_mlp", {"x": x, "ids": ids}, outputs=["probs"])
    assert framed[0] == 0  # not compressed
    assert int.from_bytes(framed[1:5], "big") == len(framed) - 5
    request = service_pb2.ModelInferRequest.FromString(unframe(framed))
    assert request.model_name == "demo_mlp"
    assert [(t.name, t.datatype, list(t.shape)) for t in request.inputs] == [("x", "FP32", [2, 16]),
                                                                            ("ids", "INT64", [1, 2])]
    assert np.array_equal(np.frombuffer(request.raw_input_contents[0], np.float32).reshape(2, 16), x)
    assert np.array_equal(np.frombuffer(request.raw_input_contents[1], np.int64), ids.ravel())
    assert [o.name for o in request.outputs] == ["probs"]


def test_unframe_refuses_what_is_not_one_message():
    message = infer_request("m", {"x": np.zeros((1, 2), np.float32)}).SerializeToString()
    framed = frame(message)
    assert unframe(framed) == message
    with pytest.raises(ValueError, match="length"):
        unframe(framed[:-1])
    with pytest.raises(ValueError, match="flag 1"):
        unframe(b"\x01" + framed[1:])
    with pytest.raises(ValueError, match="at least 5 bytes"):
        unframe(b"\x00\x00")


def test_in_flight_is_split_into_connections_and_streams():
    assert bench.split_in_flight(1, 4) == (1, 1)
    assert bench.split_in_flight(64, 4) == (4, 16)
    assert bench.split_in_flight(6, 4) == (4, 2)  # rounded up: 8 in flight
    assert bench.split_in_flight(16, 1) == (1, 16)


def test_variants_switch_dynamic_batching_off_and_on(tmp_path):
    cases = [bench.CASES["demo_mlp"], bench.CASES["particlenet_ak4"]]
    repository = bench.write_variants(cases, ["off", "on"], tmp_path)
    assert sorted(repository.names()) == ["demo_mlp_batched", "demo_mlp_unbatched",
                                          "miniaod_particlenet_ak4_batched", "miniaod_particlenet_ak4_unbatched"]
    for case in cases:
        off = parse_config(tmp_path / f"{case.model}_unbatched" / "config.pbtxt")
        on = parse_config(tmp_path / f"{case.model}_batched" / "config.pbtxt")
        assert (off.name, on.name) == (f"{case.model}_unbatched", f"{case.model}_batched")
        assert not off.HasField("dynamic_batching") and on.HasField("dynamic_batching")
        assert on.max_batch_size == off.max_batch_size == case.info().config.max_batch_size
        repository.get(off.name).verify_checksums()  # the same model file, checksum still checked


def test_particlenet_request_has_cms_lengths():
    inputs = bench.CASES["particlenet_ak4"].inputs()
    assert inputs["pf_features"].shape == (1, 20, 50) and inputs["sv_features"].shape == (1, 11, 5)
    assert all(a.dtype == np.float32 for a in inputs.values())


@pytest.mark.triton
@needs_h2load
def test_a_refused_request_is_caught_although_h2load_sees_http_200(tmp_path):
    bad = body("demo_mlp", {"x": np.zeros((1, 15), np.float32)})  # demo_mlp takes 16 features
    (tmp_path / "bad.grpc").write_bytes(bad)
    with TritonServer([DEMO_REPOSITORY], models=["demo_mlp"], backend="python",
                      workdir=tmp_path / "server") as server:
        run = bench.run_h2load(server.grpc_url, tmp_path / "bad.grpc", 20, 1, 1, tmp_path / "h2.log")
        assert run["succeeded"] == 20  # h2load alone would call this a success
        with pytest.raises(SystemExit, match="20 requests sent, the server counted 0 successes"):
            bench.measure(server, "demo_mlp", tmp_path / "bad.grpc", 20, 1, 1, tmp_path)
        with pytest.raises(SystemExit, match="refuses the prepared request: INVALID_ARGUMENT"):
            bench.check_body(server, bad, "demo_mlp")


@pytest.mark.triton
@needs_h2load
def test_benchmark_end_to_end_agrees_with_server_statistics(tmp_path, sonic_cli):
    sonic_cli("bench", "server", "--models", "demo_mlp", "--backends", "python", "--in-flight", "1", "8",
              "--rounds", "2", "--seconds", "0.05", "--min-requests", "150", "--max-requests", "300",
              "--out", tmp_path, check=True, timeout=300)
    report = json.loads((tmp_path / "server.json").read_text())
    rows = report["results"]
    assert [(r["batching"], r["in_flight"]) for r in rows] == [("off", 1), ("off", 8), ("on", 1), ("on", 8)]
    for r in rows:
        assert r["served_by"] == "onnxruntime (python-based)"
        assert r["server_success"] == r["requests_sent"] == sum(x["requests"] for x in r["rounds"])
        assert len(r["rounds"]) == 2 and 150 <= r["requests"] <= 300
        for x in r["rounds"]:
            assert x["server_success"] == x["requests"] and x["server_fail"] == 0
            assert x["server_cpu_us_per_request"] > 0 and x["requests_per_s"] > 0
            assert 0 < x["latency_ms_p50"] <= x["latency_ms_p99"]
            assert x["in_flight"] == x["clients"] * x["streams"]
        assert r["requests_per_s"] == pytest.approx(statistics.median(x["requests_per_s"] for x in r["rounds"]))
    unbatched = [r for r in rows if r["batching"] == "off"]
    assert all(x["avg_batch"] == 1.0 for r in unbatched for x in r["rounds"])  # one execution per request
    assert (tmp_path / "server.png").read_bytes()[:4] == b"\x89PNG"
    text = (tmp_path / "server.md").read_text()
    assert "| demo_mlp | python | off | 8 |" in text and "## Goals" in text


def test_miniaod_table_gives_cpu_per_event_and_says_what_was_not_measured():
    from sonic_hep.workflows.bench import miniaod

    def run(mode, event_ms, job, server):
        modules = [{"label": "pnetAK4", "type": "ParticleNetTagger", "ms_per_event": 1.0, "fraction": 0.1}]
        return {"mode": mode, "label": f"{mode}@1", "events_per_call": 1, "events_per_call_requested": 1,
                "events_per_module_call": 1.0,
                "events": 10, "event_ms": event_ms, "events_per_s": 1000 / event_ms, "job_cpu_ms": job,
                "server_cpu_ms": server, "model_ms": 1.0, "not_in_model_ms": job - 1.0, "requests": 10,
                "requests_per_event": 1.0, "client_cpu_ms_per_request": None if server is None else job / 10,
                "model_counters": {}, "modules": modules, "repeats_event_ms": [event_ms]}

    results = {"machine": "m", "input": "f.root", "config": "miniaod", "streams": 1, "threads": 1, "repeat": 1,
               "pinning": "none", "models": {"pnetAK4": "miniaod_particlenet_ak4"}, "input_mb": {"pnetAK4": 0.04},
               "runs": [run("direct", 10.0, 8.0, None), run("sonic-python", 12.0, 6.0, 4.0)],
               "ratios": {"sonic-python": 1.2}, "cpu_ratios": {"sonic-python": 1.25},
               "unavailable": {"sonic-native": "the native onnxruntime backend is not available: no g++"}}
    text = miniaod.markdown(results)
    assert "| CPU: job (+ server) ms/evt | | | | 8.0 | | 6.0 + 4.0 = 10.0 | |" in text
    assert "| sonic-python@1 | 1 · 1.0 | 12.00 | 83.3 | 6.00 | 4.00 |" in text  # the run table: CPU of job and server
    assert "sonic-native: not measured: the native onnxruntime backend is not available: no g++" in text


def test_exatrkx_table_has_a_column_per_backend_and_cpu_per_event():
    from sonic_hep.workflows.bench import exatrkx

    def run(name, job, server):
        return {"run": name, "events": 2, "event_ms": 50.0, "events_per_s": 20.0, "job_cpu_ms": job,
                "server_cpu_ms": server, "modules": {label: 1.0 for _, label, _ in exatrkx.STAGES if label},
                "server_ms": {model: 2.0 for _, _, model in exatrkx.STAGES if model},
                "counts": {"reconstructable": 2, "reconstructed": 2, "candidates": 2, "fakes": 0, "matched": 2,
                           "duplicates": 0}}

    results = {"machine": "m", "input": "e.root", "hits_per_event": 100.0, "streams": 1, "threads": 1,
               "runs": [run("direct", 60.0, None), run("sonic-python", 20.0, 45.0), run("ensemble-python", 8.0, 60.0)],
               "labels_equal": {"sonic-python": True, "ensemble-python": True},
               "unavailable": {"sonic-native": "no g++"}}
    text = exatrkx.markdown(results)
    assert "| stage | direct ms/evt | SONIC per stage, python-based ms/evt | SONIC ensemble, python-based (server) ms/evt |" \
        in text
    assert "| CPU: job (+ local server) | 60.0 | 20.0 + 45.0 = 65.0 | 8.0 + 60.0 = 68.0 |" in text
    assert "SONIC per stage, native: not measured: no g++" in text


def test_a_core_split_can_confine_the_server_and_leave_the_clients_every_core():
    """``--server-cpus 1 --client-cpus all`` (sonic bench miniaod): only the server is pinned; the
    bench process keeps its cores, and the report says so."""
    import os

    from sonic_hep.workflows.bench._machine import CoreSplit

    mine = sorted(os.sched_getaffinity(0))
    last = str(mine[-1])
    everywhere = CoreSplit(last, "all")
    assert everywhere.server_cpus == [mine[-1]] and everywhere.client_cpus == mine
    everywhere.pin_clients()
    assert sorted(os.sched_getaffinity(0)) == mine
    assert everywhere.describe() == f"server on cores {last}, clients on all {len(mine)} cores (the server's too)"
    if len(mine) > 1:
        assert CoreSplit(last).client_cpus == mine[:-1]
    with pytest.raises(SystemExit, match="--client-cpus must be rest or all"):
        CoreSplit(last, "some")


@pytest.mark.parametrize("argv, expected", [
    (["sonic", "bench", "miniaod", "--out", "/tmp/x", "--streams", "4"], "sonic bench miniaod --out OUT --streams 4"),
    (["sonic", "bench", "miniaod", "--out=/tmp/x"], "sonic bench miniaod --out=OUT"),
    (["pytest", "-q"], "sonic bench miniaod"),
])
def test_a_bench_report_gives_its_command_without_the_output_folder(monkeypatch, argv, expected):
    from sonic_hep.workflows.bench._machine import bench_command

    monkeypatch.setattr("sys.argv", argv)
    assert bench_command("miniaod") == expected
