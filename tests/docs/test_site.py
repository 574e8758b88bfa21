"""The documentation site builds in strict mode: a broken link, an anchor that does not exist, a page missing
from the navigation or a docstring reference mkdocstrings cannot resolve fails the build, and so this test.
The pages generated from the code (the command line's reference, the API reference) are checked to be there."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import PROJECT


@pytest.mark.integration
def test_site_builds_in_strict_mode(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install -e '.[docs]' (make install-test does)")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed: pip install -e '.[docs]'")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # the theme's notice about its successor, not a problem
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                            cwd=PROJECT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-6000:]
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command in ("sonic run", "sonic server status", "sonic fleet start", "sonic bench miniaod",
                    "sonic data generate protodune"):
        assert f"<code>{command}</code>" in cli, f"the CLI reference has no section for {command}"
    assert "--no-graphviz" in cli and "--events-per-job" in cli  # options, not only command names
    api = (site / "reference" / "api" / "index.html").read_text()
    for name in ("run_module", "InferenceProducer", "ExitCode", "InputTag"):
        assert re.search(rf'id="[\w.]*{name}"', api), f"the API reference does not document {name}"
    assert ":class:`" not in api  # the docstrings' reST roles were turned into Markdown
