"""The smallest documented run of ``sonic bench reliability`` (one short job, no fault, a few hostile
requests) goes end to end on real servers and writes its report; jobs too short to make both servers busy
end the wait for them instead of holding the run for two minutes."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.triton, pytest.mark.slow]


def test_smallest_reliability_run_writes_its_report(tmp_path, sonic_cli):
    result = sonic_cli("bench", "reliability", "--scenarios", "none", "--jobs", "1", "--events", "20",
                       "--fuzz-requests", "20", "--out", tmp_path, check=True, timeout=400)
    report = json.loads((tmp_path / "reliability.json").read_text())
    (none,) = report["scenarios"]
    assert none["scenario"] == "none" and none["completed"] == 1 and none["events_lost"] == 0
    assert report["fuzz"]["requests"] == 20 and report["fuzz"]["server_crashes"] == 0
    assert report["command"].startswith("sonic bench reliability")
    assert "| none |" in (tmp_path / "reliability.md").read_text()
    assert "results in" in result.stdout + result.stderr
