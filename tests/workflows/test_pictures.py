"""Pictures and progress worth looking at: ``sonic graph`` with and without Graphviz,
``sonic bench protodune``'s table and plot axis, ``sonic data generate``'s progress lines."""

from __future__ import annotations

import os
import shutil

import pytest

from sonic_hep.workflows.bench import protodune as bench


def no_dot_path() -> str:
    """This PATH without the folders holding ``dot``: the machine without Graphviz."""
    folders = os.environ["PATH"].split(os.pathsep)
    return os.pathsep.join(p for p in folders if not os.path.exists(os.path.join(p, "dot")))


def test_graph_without_graphviz_draws_with_matplotlib_and_says_how_to_get_more(tmp_path, sonic_cli):
    result = sonic_cli("graph", "protodune", cwd=tmp_path, check=True, env={"PATH": no_dot_path()})
    assert "drawn by matplotlib; install Graphviz (dot)" in result.stdout
    assert (tmp_path / "protodune.png").read_bytes()[:4] == b"\x89PNG"
    dot = (tmp_path / "protodune.dot").read_text()
    assert "cluster_legend" in dot and "EmTrkMichelId" in dot  # the DOT text does not depend on Graphviz


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_graph_with_graphviz_is_drawn_by_it(tmp_path, sonic_cli):
    result = sonic_cli("graph", "protodune", cwd=tmp_path, check=True)
    assert "(drawn by Graphviz)" in result.stdout
    assert (tmp_path / "protodune.png").read_bytes()[:4] == b"\x89PNG"
    forced = sonic_cli("graph", "protodune", "--no-graphviz", "--dot", "m.dot", "--png", "m.png", cwd=tmp_path,
                       check=True)
    assert "(drawn by matplotlib)" in forced.stdout  # asked for: no hint to install what is there


def report(rows):
    return {"machine": "test machine", "command": "sonic bench protodune", "scale": "small", "events": 3,
            "preprocessing_s_per_event": 0.002, "modes": rows, "jobs": [], "failures": {},
            "arguments": {"batch_size": 1693, "link_gbps": 100.0, "job_seconds": 25.0, "other_reco_s": 172.0},
            "derived": {"hits_per_event": 1357.0, "patch_gbit_per_event_uint8": 0.03,
                        "patch_gbit_per_event_float32": 0.1, "network_limited_jobs_uint8": 99951.0,
                        "network_limited_jobs_float32": 24988.0}}


def test_bench_table_has_no_nan_cells():
    text = bench.markdown(report([
        {"mode": "direct-cpu", "ml_s_per_event": 1.43, "events_timed": 1},
        {"mode": "sonic-cpu", "ml_s_per_event": 1.31, "events_timed": 1, "max_abs_diff_vs_direct_cpu": 0.0,
         "throughput_events_per_s": 1.96, "server": {"compute_s": 6.56}}]))
    assert "nan" not in text
    assert "| direct-cpu | 1.430 | 1 | — | — | — |" in text and "not measured" in text


def test_bench_axis_is_linear_unless_modes_differ_by_a_large_factor():
    assert not bench.needs_log_axis([1.43, 1.31])  # 9 %: bars from zero, not a log axis making it look a factor
    assert not bench.needs_log_axis([1.0, 1.14])
    assert bench.needs_log_axis([1.43, 0.02])  # CPU against GPU: the fast bar would vanish on a linear axis


def test_bench_job_line_is_a_sentence_not_a_dict():
    line = bench.job_line({"mode": "sonic-cpu", "events": 2, "wall_ms_per_event": 424.4, "preprocessing_ms": 3.1,
                           "inference_ms": 418.0, "other_modules_ms": 1.0, "io_and_framework_ms": 2.3})
    assert line == ("job sonic-cpu: 2 events, 424 ms/event = preprocessing 3 + inference 418 + other modules 1 "
                    "+ I/O and framework 2")


def test_bench_protodune_prints_a_table_and_where_results_went(tmp_path, sonic_cli):
    out = tmp_path / "results"
    result = sonic_cli("bench", "protodune", "--scale", "small", "--events", "2", "--modes", "direct-cpu",
                       "--job-events", "0", "--saturation", "0", "--ort-threads", "1", "--out", out, check=True)
    assert "| direct-cpu |" in result.stdout and "nan" not in result.stdout
    assert f"results in {out}/protodune.{{md,json,png}}" in result.stdout
    assert (out / "protodune.png").exists()


def test_data_generate_shows_progress(tmp_path, sonic_cli):
    result = sonic_cli("data", "generate", "protodune", "--events", "3", "--basket", "2", "--scale", "small",
                       "--output", tmp_path / "p.root", check=True)
    assert "events 0-1 of 0-2:" in result.stderr and "events 2-2 of 0-2:" in result.stderr


def test_miniaod_generate_shows_progress_in_a_pipe(tmp_path, sonic_cli):
    """Piped (as under ``make demo`` or into a log), a line per batch instead of nothing."""
    pytest.importorskip("pythia8mc")
    result = sonic_cli("data", "generate", "miniaod", "--events", "4", "--batch-size", "2", "--output",
                       tmp_path / "m.root", check=True)
    assert [line.split(" events")[0] for line in result.stderr.splitlines() if "/s)" in line] == ["2/4", "4/4"]
