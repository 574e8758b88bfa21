"""Fixtures of the grid tests: small input files, a real Slurm, and helpers to watch jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sonic_hep.modules.common.collections  # noqa: F401 - registers the module types used in-process
import sonic_hep.modules.common.histograms  # noqa: F401
import sonic_hep.modules.common.synthetic  # noqa: F401
from sonic_hep.framework import Process
from sonic_hep.framework import config as cfgmod
from tests.grid.samples import write_nano
from tests.polling import gone, wait_for  # wait_for: the grid tests import it from here too

SIZES = (120, 80, 100)


@pytest.fixture(scope="session")
def inputs(tmp_path_factory) -> list[Path]:
    """Three NanoAOD-like files of 120, 80 and 100 events."""
    base = tmp_path_factory.mktemp("grid-inputs")
    return [write_nano(base / f"in{i}.root", n, seed=10 + i, first_event=1000 * i + 1) for i, n in enumerate(SIZES)]


def single_run(config: Path, inputs: list[Path], output: Path, overrides: tuple[str, ...] = ()) -> Path:
    """The reference: one process over all inputs."""
    files = "[" + ", ".join(f"'{p}'" for p in inputs) + "]"
    cfg = cfgmod.load(config, [f"source.files={files}", f"output.file={output}", *overrides])
    Process(cfg).run(progress=False)
    return output


def reports(task_dir: Path) -> list[dict]:
    """Every job's state.json."""
    return [json.loads(p.read_text()) for p in sorted(task_dir.glob("jobs/*/state.json"))]


def max_concurrent(task_dir: Path) -> int:
    """The most jobs that were running at the same moment (from their start and end times)."""
    edges = []
    for rep in reports(task_dir):
        edges += [(rep["started"], 1), (rep["ended"], -1)]
    running = peak = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):
        running += step
        peak = max(peak, running)
    return peak


def submit_and_wait(config: Path, output_dir: Path, inputs: list[Path] | None = None, timeout: float = 120,
                    **request: object) -> list:
    """Submits in this process (the executor's own processes run the jobs) and waits for every job to end."""
    from sonic_hep.workflows.grid.status import wait
    from sonic_hep.workflows.grid.submit import SubmitRequest, submit

    outcome = submit(SubmitRequest(config=str(config), output_dir=str(output_dir),
                                   inputs=[str(p) for p in inputs] if inputs else None, **request))
    statuses = wait(outcome.task, interval=0.3, timeout=timeout)
    drivers_gone(Path(output_dir))
    return statuses


def drivers_gone(task_dir: Path, timeout: float = 60.0) -> None:
    """Waits until every driver process of a local or dask task has exited (none is left behind)."""
    for record in task_dir.glob("logs/driver-*.json"):
        pid = json.loads(record.read_text())["pid"]
        wait_for(lambda pid=pid: gone(pid), timeout, f"driver {pid} to exit")
