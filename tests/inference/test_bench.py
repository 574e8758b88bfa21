"""``sonic bench inference --quick`` runs end to end and writes its table, JSON and plot."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.triton, pytest.mark.slow]


def test_quick_inference_benchmark_writes_reports(tmp_path, sonic_cli):
    result = sonic_cli("bench", "inference", "--quick", "--out", tmp_path, check=True, timeout=400)
    report = json.loads((tmp_path / "inference.json").read_text())
    modes = {(r["model"], r["mode"]) for r in report["latency"]}
    assert modes == {(m, mode) for m in ("small", "large") for mode in ("direct", "sonic", "sonic+shm")}
    assert all(r["requests_per_s"] > 0 for r in report["latency"])
    unbatched, batched = report["batching"]
    assert batched["avg_batch"] > unbatched["avg_batch"] == 1.0  # the server did batch
    # loaded by h2load as sonic bench server does: every request an execution without batching, CPU counted
    assert unbatched["executions"] >= 200 and all(r["server_cpu_ms_per_request"] > 0 for r in (unbatched, batched))
    assert {r["mode"] for r in report["workflow"]} == {"direct", "sonic"}
    assert "ratio_to_direct" in report["workflow"][-1]
    assert (tmp_path / "inference.png").stat().st_size > 10_000
    assert "| small | 8 | sonic |" in (tmp_path / "inference.md").read_text()
    assert "Dynamic batching:" in result.stdout
