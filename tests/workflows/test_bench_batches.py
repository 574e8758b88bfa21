"""Per event vs in batches in one bench run: ``sonic bench miniaod --events-per-call`` and the columnar
overhead of ``sonic bench framework``.

Small runs on purpose: what is checked is that every figure of the pages is there and agrees with the
counters it is made of (requests per event × events = the inference client's requests, the batch size a
label shows = the one the scheduler used), never how fast anything ran.
"""

from __future__ import annotations

import json

import pytest

from sonic_hep.workflows.bench.framework import fit_per_call
from sonic_hep.workflows.bench.miniaod import parse_events_per_call, run_label, value_name


def test_events_per_call_list_reads_integers_and_auto():
    assert parse_events_per_call("1,auto") == [1, 0]
    assert parse_events_per_call(" 4 , 1 ,AUTO,") == [4, 1, 0]
    for bad in ("1,x", "1,1", "-2", ""):
        with pytest.raises(SystemExit):
            parse_events_per_call(bad)
    assert value_name(0) == "auto" and value_name(10) == "10"
    # the label says what the scheduler chose for auto: a figure is only read with its batch size
    assert run_label("direct", 0, 500) == "direct@auto(500)" and run_label("direct", 1, 1) == "direct@1"


def test_fit_separates_the_cost_of_a_call_from_its_events():
    rows = [{"events_per_call": n, "us_per_call": 20.0 + 0.5 * n} for n in (1, 10, 100, 1000)]
    a, b = fit_per_call(rows)
    assert a == pytest.approx(20.0) and b == pytest.approx(0.5)


def _check_run(run: dict, values: dict[str, int]) -> None:
    """One run's figures against the counters they come from."""
    events = run["events"]
    counters = run["inference"]["models"]
    assert run["requests"] == sum(c["requests"] for c in counters.values()) > 0
    assert run["requests_per_event"] * events == pytest.approx(run["requests"])
    for model, figures in run["model_counters"].items():
        assert figures["requests_per_event"] * events == pytest.approx(counters[model]["requests"])
        assert figures["rows_per_request"] * figures["requests"] == pytest.approx(counters[model]["rows"])
        assert figures["calls"] == counters[model]["calls"] <= figures["requests"]
    assert run["model_ms"] == pytest.approx(sum(1000 * c["seconds"] / events for c in counters.values()))
    if run["mode"] == "direct":
        assert run["not_in_model_ms"] == pytest.approx(run["job_cpu_ms"] - run["model_ms"])
        assert run["client_cpu_ms_per_request"] is None
    else:
        assert run["not_in_model_ms"] == pytest.approx(run["job_cpu_ms"])
        assert run["client_cpu_ms_per_request"] == pytest.approx(run["job_cpu_ms"] * events / run["requests"])
    requested = run["events_per_call_requested"]
    assert run["events_per_call"] == (requested or run["events_per_call"]) >= 1
    assert run["label"] == run_label(run["mode"], requested, run["events_per_call"])
    assert value_name(requested) in values
    # a module is called at most once per event (per-event modules; a filter upstream may skip some)
    assert all(0 <= module["invocations"] <= events for module in run["modules"])
    assert 1 <= run["events_per_module_call"] <= min(run["events_per_call"], events)


def test_miniaod_bench_runs_every_mode_at_every_batch_size(sonic_cli, tmp_path):
    sonic_cli("bench", "miniaod", "--events", "6", "--modes", "direct", "--events-per-call", "1,4,auto",
              "--repeat", "2", "--out", tmp_path, check=True, timeout=600)
    report = json.loads((tmp_path / "miniaod.json").read_text())
    assert report["events_per_call_values"] == [1, 4, 0] and report["repeat"] == 2
    assert [r["events_per_call_requested"] for r in report["runs"]] == [1, 4, 0]
    for run in report["runs"]:
        assert run["events"] == 6 and len(run["repeats_event_ms"]) == 2
        _check_run(run, {"1", "4", "auto"})
    one, four = report["runs"][0], report["runs"][1]
    for model, figures in four["model_counters"].items():  # a batch never sends more requests than one event at a time
        assert figures["requests"] <= one["model_counters"][model]["requests"]
    # every run against the first, the largest difference said once
    assert set(report["comparisons"]) == {r["label"] for r in report["runs"][1:]}
    assert report["max_difference"] == max(c["max_difference"] for c in report["comparisons"].values())
    batches = report["summary"]["batches"]
    assert [(b["mode"], b["baseline"]) for b in batches] == [("direct", "1"), ("direct", "1")]
    assert all(b["speedup"] > 0 for b in batches) and report["summary"]["sonic_vs_direct"] == []
    text = (tmp_path / "miniaod.md").read_text()
    for needle in ("Command: `sonic bench miniaod", "Machine:", "Date:", "not in model calls", "direct@4",
                   f"direct@auto({report['runs'][2]['events_per_call']})", "Per module, events per call 1",
                   "largest |difference|", "rows per request"):
        assert needle in text, needle


@pytest.mark.triton
@pytest.mark.slow
def test_miniaod_bench_sonic_against_direct_at_each_batch_size(sonic_cli, tmp_path):
    sonic_cli("bench", "miniaod", "--events", "4", "--modes", "direct,sonic-python", "--events-per-call", "1,auto",
              "--out", tmp_path, check=True, timeout=600)
    report = json.loads((tmp_path / "miniaod.json").read_text())
    assert [r["label"].split("(")[0] for r in report["runs"]] == \
        ["direct@1", "direct@auto", "sonic-python@1", "sonic-python@auto"]
    for run in report["runs"]:
        _check_run(run, {"1", "auto"})
    assert [s["events_per_call"].split("(")[0] for s in report["summary"]["sonic_vs_direct"]] == ["1", "auto"]
    assert all(s["event_time_ratio"] > 0 and s["cpu_ratio"] > 0 for s in report["summary"]["sonic_vs_direct"])
    # SONIC gives what direct gives at the same batch size
    assert report["outputs_equal_across_modes"], report["mode_comparisons"]


def test_framework_bench_measures_columnar_calls_per_batch_size(sonic_cli, tmp_path):
    sonic_cli("bench", "framework", "--events", "100", "--modules", "1", "2", "--repeat", "1", "--io-events", "0",
              "--events-per-call", "1", "10", "--columnar-calls", "5", "--dijet-events", "1500", "--out", tmp_path,
              check=True, timeout=600)
    report = json.loads((tmp_path / "framework.json").read_text())
    assert report["command"].startswith("sonic bench framework") and report["date"] and report["machine"]
    columnar = report["columnar"]
    assert [r["events_per_call"] for r in columnar["rows"]] == [1, 10]
    for row in columnar["rows"]:  # the scheduler made the calls each row divides by
        assert row["events"] == 5 * row["events_per_call"] and row["calls_per_module"] == 5
        assert row["us_per_call"] == pytest.approx(row["us_per_event_per_module"] * row["events_per_call"])
    assert set(columnar["fit"]) == {"us_per_call", "us_per_event"}
    assert "met" not in columnar["goals"]  # 1000 events per call was not run
    # the tutorial's module ran in a job at each batch size, one event per call on at most 1,000 events
    assert [(r["events_per_call"], r["events"]) for r in report["dijet"]] == [(1, 1000), (1000, 1500)]
    assert [r["events_per_module_call"] for r in report["dijet"]] == [1.0, 750.0]  # 1,500 events: 2 calls
    text = (tmp_path / "framework.md").read_text()
    assert "Columnar modules" in text and "a + b·events" in text and "Date:" in text and "DijetMass" in text
