"""When gRPC compression pays (``workflows/grid/compression_pays.py``) and how ``sonic plan`` says it."""

from __future__ import annotations

import json
import math

import pytest

from sonic_hep.workflows.grid.compression_pays import compression_pays, time_per_event
from sonic_hep.workflows.grid.errors import GridError


def test_the_break_even_rate_is_where_both_times_meet():
    # 4 MB per event, a ratio of 4 and 50 ms of CPU: 3 MB saved per 50 ms is 60 MB/s, 480 Mb/s
    verdict = compression_pays(4e6, 4.0, 0.050)
    assert verdict.break_even_mbit == pytest.approx(480.0)
    at = verdict.break_even_mbit
    assert time_per_event(1.0, 4e6, at) == pytest.approx(time_per_event(1.0, 4e6, at, ratio=4.0, cpu_s=0.050))
    assert time_per_event(1.0, 4e6, at / 2, ratio=4.0, cpu_s=0.050) < time_per_event(1.0, 4e6, at / 2)  # slower link
    assert time_per_event(1.0, 4e6, at * 2, ratio=4.0, cpu_s=0.050) > time_per_event(1.0, 4e6, at * 2)  # faster link


def test_what_does_not_shrink_never_pays_and_what_costs_nothing_always_does():
    assert compression_pays(4e6, 1.0, 0.05).break_even_mbit is None
    assert compression_pays(4e6, 0.9, 0.05).break_even_mbit is None
    assert math.isinf(compression_pays(4e6, 2.0, 0.0).break_even_mbit)
    with pytest.raises(GridError, match="must be positive"):
        compression_pays(0, 2.0, 0.01)
    with pytest.raises(GridError, match="cannot be negative"):
        compression_pays(1e6, 2.0, -0.01)


def test_sonic_plan_prints_the_rate_and_the_link_cap_with_compression(sonic_cli):
    args = ["plan", "--other-ms-per-event", "1000", "--bytes-per-event", "4e6", "--link-gbps", "10",
            "--compression-ratio", "4", "--compression-cpu-ms-per-event", "50"]
    text = sonic_cli(*args, check=True).stdout
    assert "compression pays below R* = B (1 - 1/r) / c = 480.0 Mb/s per job" in text
    assert "once more than 21 jobs share it" in text  # 10 Gb/s / 480 Mb/s
    cap = json.loads(sonic_cli(*args, "--json", check=True).stdout)
    assert cap["compression"]["break_even_mbit"] == pytest.approx(480.0)
    assert f"the link carries {math.floor(cap['link_job_cap'] * 4)} jobs (cap x r)" in text
    missing = sonic_cli(*args[:-2])
    assert missing.returncode != 0
    assert missing.stderr.strip().splitlines()[-1] == ("sonic: error: give both --compression-ratio and "
                                                      "--compression-cpu-ms-per-event (sonic bench compression "
                                                      "measures them)")
