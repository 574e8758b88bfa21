"""The optional-import helper: one line naming the pip extra, and a table that matches pyproject.toml."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from sonic_hep.framework import extras
from sonic_hep.framework.errors import SonicError
from sonic_hep.workflows.grid.errors import GridError

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@pytest.fixture
def without(monkeypatch):
    """Makes ``import NAME`` fail as if the package were not installed (``None`` in ``sys.modules``), also for
    its submodules that earlier tests imported (they would be found in ``sys.modules`` without their parent)."""
    def hide(name: str) -> None:
        for loaded in [m for m in sys.modules if m.startswith(name + ".")]:
            monkeypatch.setitem(sys.modules, loaded, None)
        monkeypatch.setitem(sys.modules, name, None)
    return hide


def test_every_entry_is_a_requirement_of_pyproject():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    for module, (extra, requirement) in extras.EXTRAS.items():
        listed = project["optional-dependencies"][extra] if extra else project["dependencies"]
        assert requirement in listed, f"{module}: {requirement!r} is not in pyproject.toml's {extra or 'dependencies'}"


def test_missing_module_is_a_one_line_error_naming_the_extra(without):
    without("htcondor2")
    with pytest.raises(extras.MissingDependency) as err:
        extras.require("htcondor2", "the condor executor")
    text = str(err.value)
    assert text.startswith("the condor executor needs htcondor>=24.0 (")
    assert text.endswith(": pip install 'sonic-hep[grid]'") and "\n" not in text
    assert isinstance(err.value, SonicError) and isinstance(err.value, ModuleNotFoundError)


def test_callers_keep_their_error_type(without):
    without("dask_jobqueue")
    with pytest.raises(GridError, match=r"needs dask-jobqueue>=0\.8 .*pip install 'sonic-hep\[grid\]'$"):
        extras.require("dask_jobqueue", "the dask executor's cluster option", GridError)


def test_missing_parent_of_a_dotted_module_names_the_distribution(without):
    without("acts")
    with pytest.raises(extras.MissingDependency, match=r"needs pyacts==48\.1\.0 .*sonic-hep\[generators\]"):
        extras.require("acts.examples.json", "the simulation")


def test_core_dependency_hint_names_the_requirement():
    assert extras.install_hint("pytriton") == "pip install 'nvidia-pytriton>=0.5'"


def test_present_module_is_returned():
    import pytriton  # a core dependency, always installed

    assert extras.require("pytriton", "the Triton server") is pytriton


def test_unlisted_module_is_a_programming_error():
    with pytest.raises(KeyError, match="EXTRAS"):
        extras.require("json", "anything")


def test_dask_executor_without_distributed_names_the_grid_extra(without):
    from sonic_hep.workflows.grid.executors.dask import DaskExecutor

    without("distributed")
    executor = DaskExecutor.__new__(DaskExecutor)  # pool() fails on the import before touching the task
    with pytest.raises(GridError, match=r"^the dask executor needs dask\[distributed\]>=2024\.1 .*sonic-hep\[grid\]'$"):
        with executor.pool(1):
            pass


def test_condor_executor_without_bindings_names_the_grid_extra(without):
    from sonic_hep.workflows.grid.errors import SubmitError
    from sonic_hep.workflows.grid.executors.condor import CondorExecutor

    without("htcondor2")
    executor = CondorExecutor.__new__(CondorExecutor)  # submit() needs the bindings before anything else
    with pytest.raises(SubmitError, match=r"^the condor executor needs htcondor>=24\.0 .*sonic-hep\[grid\]'$"):
        executor.submit([0], None)


def test_jet_clustering_without_fastjet_names_the_generators_extra(without):
    from sonic_hep.data.miniaod.jets import cluster

    without("fastjet")
    with pytest.raises(extras.MissingDependency, match=r"^the MiniAOD generator's jet clustering needs fastjet>=3\.4 "
                                                       r".*pip install 'sonic-hep\[generators\]'$"):
        cluster(None, 0, None, None, 0.4, 0.0)  # the import comes before any argument is used
