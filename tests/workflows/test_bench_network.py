"""``sonic bench network``: its steady per-event time, and a small run end to end in the network lab (a real
server in one namespace, real jobs in the other, the relay's delay in between)."""

from __future__ import annotations

import json

import pytest

from sonic_hep.workflows.bench.network import steady_seconds_per_event
from sonic_hep.workflows.netlab import namespaces
from sonic_hep.workflows.netlab.namespaces import NAME
from sonic_hep.framework.inference.owner import ProcessId


def test_the_steady_stretch_has_every_stream_busy_at_both_ends():
    batches = [[float(t), 10] for t in range(1, 8)]  # a batch of 10 events done every second
    # two streams: from the first wave's end (t=2) to the last completion before the drain (t=6)
    assert steady_seconds_per_event(batches, 2) == pytest.approx(4 / 40)
    assert steady_seconds_per_event(batches[:3], 2) is None  # no stretch with both streams busy at its ends
    assert steady_seconds_per_event(batches, 1) == pytest.approx(6 / 60)


def test_a_small_run_in_the_lab(sonic_cli, tmp_path):
    if namespaces.refusal():
        pytest.skip(namespaces.refusal())
    done = sonic_cli("bench", "network", "--workflows", "protodune", "--links", "rtt=20ms", "--streams", "1",
                     "--events", "4", "--no-direct", "--share-jobs", "--out", tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "network.json").read_text())
    far = next(r for r in report["rows"] if r["link"] == "RTT 20 ms")
    assert far["measured_rtt_ms"] >= 19.0  # the lab's own delay, measured on the jobs' side
    assert far["bytes_sent_per_event"] > 1e5 and far["requests_per_event"] >= 1  # patches crossed the link
    assert "predicted_ms" in far and far["relay"]
    assert any(r["link"] == "unshaped, no relay" for r in report["rows"])  # the relay's own cost measured
    assert (tmp_path / "network.png").stat().st_size > 0 and "## protodune" in (tmp_path / "network.md").read_text()
    # the bench has ended: no lab namespace of a process that is gone is left (other runs' may be live)
    left = [name for name in namespaces.names() if (m := NAME.match(name))
            and not ProcessId(int(m["pid"]), int(m["start"])).alive(same_command=False)]
    assert not left
