"""``sonic run CONFIG --inference sonic`` with no server: a local server lives exactly as long as the run."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import uproot

pytestmark = pytest.mark.triton


def _columns(path) -> dict[str, np.ndarray]:
    arrays = uproot.open(path)["Events"].arrays(library="np")
    return {k: np.concatenate(v) if v.dtype == object else v for k, v in arrays.items()}


def test_sonic_run_starts_and_stops_a_local_server_and_matches_direct(tmp_path, sonic_cli):
    common = ["run", "demo_inference", "-n", "300", "--no-progress"]
    direct = sonic_cli(*common, "-o", tmp_path / "direct.root", check=True)
    assert "mode direct" in direct.stdout
    sonic = sonic_cli(*common, "-o", tmp_path / "sonic.root", "--inference", "sonic", check=True)
    assert "mode sonic" in sonic.stdout and "server-side (Triton statistics" in sonic.stdout
    ready = re.search(r"Triton server ready, pid (\d+), listening on grpc (\S+?),", sonic.stderr)
    assert ready, sonic.stderr
    assert re.search(rf"{re.escape(ready.group(2))} \(fallback\) +demo_mlp +\d+", sonic.stdout)
    pid = int(ready.group(1))
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped with the run
    a, b = _columns(tmp_path / "direct.root"), _columns(tmp_path / "sonic.root")
    assert a.keys() == b.keys() and len(a["event"]) == 300
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=0, atol=1e-5, err_msg=name)


def test_sonic_run_with_an_unreachable_server_and_no_fallback_says_so(sonic_cli):
    result = sonic_cli("run", "demo_inference", "-n", "5", "--no-progress", "--inference", "sonic",
                       "--server", "127.0.0.1:9", "-p", "services.inference.fallback=false")
    assert result.returncode == 1
    assert "Triton server 127.0.0.1:9 is not reachable; skipped" in result.stderr
    assert "no server can run model 'demo_mlp': 127.0.0.1:9: down" in result.stderr
