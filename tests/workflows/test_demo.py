"""The README's first command (``make demo`` → ``sonic demo``) works end to end: Pythia events, direct and
SONIC through a real local Triton server, equal outputs."""

from __future__ import annotations

import json

import uproot


def test_sonic_demo(tmp_path, sonic_cli):
    result = sonic_cli("demo", "--workdir", tmp_path / "demo", "--events", "8", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK at atol" in result.stdout
    assert "server-side (Triton statistics" in result.stdout  # the SONIC run really went through a server
    for mode in ("direct", "sonic"):
        assert uproot.open(tmp_path / "demo" / f"{mode}.root")["Events"].num_entries == 8
        report = json.loads((tmp_path / "demo" / f"timing_{mode}.json").read_text())
        assert report["events"] == 8 and report["inference"]["mode"] == mode
