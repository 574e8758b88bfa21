"""Prometheus for fleets: the scrape targets follow the fleet directory (written whole, only when they change),
the settings are checked in one line, the autoscaler's sample is SuperSONIC's number, and end to end a real
Prometheus (Debian's) scrapes a real Triton server: the rule's value equals what the server's own counters say,
``sonic fleet status`` shows it, and every query of the shipped Grafana dashboard is valid PromQL."""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from sonic_hep.framework.inference.serving import TritonServer
from sonic_hep.framework.inference.serving.fleet_directory import (
    Entry,
    deregister,
    register,
)
from sonic_hep.workflows.grid import fleet_prometheus as fp
from sonic_hep.workflows.grid.errors import GridError
from sonic_hep.workflows.grid.fleet import Fleet, FleetSpec, Member
from sonic_hep.workflows.grid.fleet_manager import Sampler

from tests.conftest import PROJECT
from tests.polling import wait_for

DEMO = PROJECT / "data" / "models" / "demo"


def test_targets_follow_the_fleet_directory_and_are_rewritten_only_when_they_change(tmp_path):
    fleet = tmp_path / "f1"
    register(fleet, Entry(name="0001", address="h1:8001", metrics="h1:8002"))
    register(fleet, Entry(name="0000", address="h0:8001", metrics="h0:8002"))
    register(fleet, Entry(name="0002", address="h2:8001"))  # an entry that says nothing of its metrics
    register(fleet, Entry(name="0003", address="h3:8001", metrics="h3:8002", pid=999999))  # its process is gone
    assert fp.keep_in_step(fleet) is True
    path = fleet / "prometheus" / "targets.json"
    assert json.loads(path.read_text()) == [  # file_sd, in name order; the expired entry is not a target
        {"targets": ["h0:8002"], "labels": {"server": "0000", "fleet": "f1"}},
        {"targets": ["h1:8002"], "labels": {"server": "0001", "fleet": "f1"}}]
    written = path.stat().st_mtime_ns
    assert fp.keep_in_step(fleet) is False and path.stat().st_mtime_ns == written  # unchanged: not touched
    deregister(fleet, "0000")  # a server leaves: dropped at the next round
    assert fp.keep_in_step(fleet) is True
    assert [g["labels"]["server"] for g in json.loads(path.read_text())] == ["0001"]
    assert [p.name for p in path.parent.iterdir()] == ["targets.json"]  # no temporary left beside it


@pytest.mark.parametrize("changes, message", [
    ({"prometheus": "prom:9090"}, r"--prometheus must be local or a URL such as http://HOST:9090, not 'prom:9090'"),
    ({"scale_metric": "prometheus"}, r"--scale-metric prometheus needs a Prometheus: --prometheus local or"),
    ({"scale_metric": "queue"}, r"--scale-metric must be one of statistics, prometheus, not 'queue'"),
    ({"prometheus": "local", "prometheus_scrape_s": 0}, r"--prometheus-scrape-s must be positive, got 0"),
])
def test_bad_prometheus_settings_are_one_line(changes, message):
    with pytest.raises(GridError, match=message):
        FleetSpec([str(DEMO)], **changes)


def test_the_autoscalers_sample_from_prometheus_is_supersonics_number_and_unknown_is_not_idle(monkeypatch):
    loads = {"queue": 250.0, "servers": {"0000": {"requests": 12.4}, "0001": {"requests": 0.0}}}

    def fleet_load(url, name, window_s, at=None):
        assert (url, name, window_s) == ("http://prom:9090", "fleet", 20.0)
        return fp.FleetLoad(window_s, loads["queue"], loads["servers"])

    class FakeFleet:
        directory = None

        def members(self):
            return [Member(i, "running", entry=Entry(f"000{i}", f"h{i}:1")) for i in range(3)] + [Member(3, "pending")]

    monkeypatch.setattr(fp, "fleet_load", fleet_load)
    sampler = fp.PrometheusSampler(Sampler(), "http://prom:9090", "fleet", 20.0)
    sample = sampler.sample(FakeFleet())
    # 250 µs of queueing per execution is 0.25 ms against --scale-threshold-ms; 0002 not scraped twice yet: unknown
    assert (sample.queue_ms, sample.requests, sample.starting) == (0.25, {"0000": 12, "0001": 0, "0002": -1}, 1)
    loads["queue"] = None  # nothing executed in the window: no number, not zero
    assert sampler.sample(FakeFleet()).queue_ms is None


def _counters(metrics_url: str) -> tuple[float, float]:
    """``(queue µs, executions)`` of demo_mlp from the server's own /metrics."""
    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    value = {name: float(re.search(rf'^{name}{{model="demo_mlp",version="1"}} (\S+)$', text, re.MULTILINE)[1])
             for name in ("nv_inference_queue_duration_us", "nv_inference_exec_count")}
    return value["nv_inference_queue_duration_us"], value["nv_inference_exec_count"]


@pytest.mark.triton
@pytest.mark.timeout(180)
def test_a_real_prometheus_scrapes_the_fleets_server_and_reads_back_supersonics_rule(tmp_path, sonic_cli):
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/system-deps does)")
    spec = FleetSpec([str(DEMO)], models=["demo_mlp"], host="127.0.0.1", prometheus="local", prometheus_scrape_s=1.0,
                     scale_metric="prometheus")
    fleet = Fleet.create(tmp_path / "fleet", spec, 1)
    with TritonServer([DEMO], models=["demo_mlp"], workdir=tmp_path / "server") as server:
        register(fleet.directory, Entry(name="0000", address=server.grpc_url, models={"demo_mlp": "1"},
                                        metrics=fp.metrics_address(spec, server)))
        prometheus = fp.start_for(fleet)  # as the manager does with --prometheus local
        assert prometheus is not None and fp.url_of(fleet.directory, "local") == prometheus.url
        client = grpcclient.InferenceServerClient(server.grpc_url)
        request = grpcclient.InferInput("x", [4, 16], "FP32")
        request.set_data_from_numpy(np.ones((4, 16), np.float32))
        try:
            def scraped(executions: float) -> bool:
                found = fp.query(prometheus.url, 'nv_inference_exec_count{server="0000",model="demo_mlp"}')
                return bool(found) and found[0][1] == executions

            before = _counters(server.metrics_url)
            wait_for(lambda: scraped(before[1]), 60, "Prometheus to scrape the server")
            started = time.time()
            for _ in range(60):
                client.infer("demo_mlp", [request])
            after = _counters(server.metrics_url)  # nothing else talks to this server: these are the new counts
            wait_for(lambda: scraped(after[1]), 30, "Prometheus to scrape the new counts")
            at = time.time()
            load = fp.fleet_load(prometheus.url, fleet.directory.name, window_s=at - started + 3.0, at=at)
            expected = (after[0] - before[0]) / (after[1] - before[1])  # µs of queueing per execution, from Triton
            assert after[1] > before[1] and load.queue_us_per_exec == pytest.approx(expected, rel=1e-9)
            assert load.servers["0000"]["queue_us_per_exec"] == pytest.approx(expected, rel=1e-9)

            busy = threading.Event()

            def traffic() -> None:  # steady requests while status and the autoscaler read the live numbers
                while not busy.is_set():
                    client.infer("demo_mlp", [request])
                    time.sleep(0.01)

            sender = threading.Thread(target=traffic, daemon=True)
            sender.start()
            try:
                window = fp.window_for(spec, 5.0)
                wait_for(lambda: fp.fleet_load(prometheus.url, fleet.directory.name, window).queue_us_per_exec
                         is not None, 30, "a live number over the autoscaler's window")
                sample = fp.sampler_for(fleet, Sampler(), 5.0).sample(fleet)
                shown = json.loads(sonic_cli("fleet", "status", fleet.directory, "--json", check=True).stdout)
                text = sonic_cli("fleet", "status", fleet.directory, check=True).stdout
            finally:
                busy.set()
                sender.join(10)
            assert sample.queue_ms is not None and sample.queue_ms >= 0 and sample.requests["0000"] > 0
            numbers = shown["prometheus"]
            assert numbers["url"] == prometheus.url and numbers["scale_metric"] == "prometheus"
            assert numbers["queue_us_per_exec"] >= 0 and numbers["servers"]["0000"]["requests_per_s"] > 0
            assert re.search(rf"prometheus {re.escape(prometheus.url)} \(autoscaler reads prometheus\): queue "
                             r"[\d.]+ µs per execution", text), text

            # every query of the shipped dashboard is PromQL the real Prometheus accepts
            dashboard = json.loads(fp.DASHBOARD.read_text())
            expressions = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
            assert len(expressions) >= 7
            for expression in expressions:
                fp.query(prometheus.url, expression.replace("$__rate_interval", "5s").replace("$fleet", ".*"))
        finally:
            client.close()
            prometheus.stop()
    assert not (fleet.directory / "prometheus" / "prometheus.json").exists()  # its record goes with it
    assert prometheus.process.poll() is not None
