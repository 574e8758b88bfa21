"""Fixtures shared by every test area: where ../shared is, and how to run the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sonic_hep.framework.paths import PROJECT_ROOT as PROJECT
from sonic_hep.framework.paths import shared_folder
from tests.grid.slurm_cluster import MiniSlurm, missing_programs

SHARED = shared_folder()


def shared_path(*parts: str) -> Path:
    """A file under ../shared, or a skip when the checkout has none (users' checkouts do not)."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not available (../shared is only beside the development checkout)")
    return path


@pytest.fixture
def sonic_cli():
    """Runs the ``sonic`` command line in a subprocess; returns the CompletedProcess."""

    def run(*args: str, cwd: str | os.PathLike | None = None, check: bool = False, timeout: float = 300,
            env: dict | None = None) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "sonic_hep.workflows.cli", *map(str, args)]
        result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                                env={**os.environ, **(env or {})})
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result

    return run


@pytest.fixture(scope="session")
def slurm(tmp_path_factory) -> MiniSlurm:
    """One real single-node Slurm for the whole session, shared by the grid and reliability tests
    (skipped only where slurm-wlm is not installed)."""
    missing = missing_programs()
    if missing:
        pytest.skip(f"Slurm is not installed (missing {', '.join(missing)}; apt-get install slurm-wlm)")
    cluster = MiniSlurm(tmp_path_factory.mktemp("slurm")).start()
    yield cluster
    cluster.stop()


#: folders whose tests run whole commands, jobs, task directories or clusters, end to end
END_TO_END_FOLDERS = ("grid", "reliability", "workflows")


def pytest_collection_modifyitems(config, items):
    """Marks the fast loop (``pytest -m unit``, see CONTRIBUTING.md) here rather than on every test: a test is
    ``integration`` when it lives in an end-to-end folder or runs the command line in a subprocess
    (``sonic_cli``), and ``unit`` when it is none of integration, triton, slurm or slow."""
    for item in items:
        path = Path(str(item.fspath)).resolve()
        folder = path.relative_to(PROJECT / "tests").parts[0] if path.is_relative_to(PROJECT / "tests") else ""
        if folder in END_TO_END_FOLDERS or "sonic_cli" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)
        if not any(item.get_closest_marker(name) for name in ("integration", "triton", "slurm", "slow")):
            item.add_marker(pytest.mark.unit)
