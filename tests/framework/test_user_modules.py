"""A user's own module file, no packaging: `imports:` in the configuration (or `type: file.Class`), listed by
`sonic describe`, run through the CLI, the Python API and grid job configs, tested with run_module; missing
files, modules and classes are one line naming them. The tutorial of docs/modules.md is run here as written."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import uproot
import yaml

from sonic_hep.framework import ConfigError, Process, load, run
from sonic_hep.framework.errors import ParamError
from sonic_hep.framework.registry import UserModuleError, import_user_module, lookup

#: the tutorial's module file (docs/modules.md), verbatim
TUTORIAL_MODULES = '''\
"""My own modules, next to my configuration."""
import awkward as ak

from sonic_hep.framework import Filter, InputTag, Output, Param, Producer


class LeadingJetPt(Producer):
    """pt of the hardest jet (0 when there is none)."""

    jets = InputTag("Jet", fields=("pt",), doc="jets")
    pt = Output("float: leading jet pt in GeV")

    def produce(self, event):
        pt = ak.to_numpy(event.get(self.jets).pt)
        event.put("pt", float(pt.max()) if len(pt) else 0.0)


class HardEvent(Filter):
    """Keeps events whose leading jet is above a threshold."""

    src = InputTag("lead:pt", doc="the leading jet pt")
    min_pt = Param(float, 100.0, doc="threshold in GeV")

    def filter(self, event):
        return event.get(self.src) > self.min_pt
'''

#: the tutorial's configuration (docs/modules.md), verbatim (files are given on the command line)
TUTORIAL_CONFIG = '''\
process: mine
imports: [my_analysis]          # my_analysis.py beside this file (or on PYTHONPATH)
modules:
  lead: {type: LeadingJetPt}
  hard: {type: HardEvent, min_pt: 80.0}
path: [lead, hard]
output:
  products: ["lead:pt", MET_pt]
'''


@pytest.fixture(autouse=True)
def _own_sys_path(monkeypatch):
    """Imports of user files put their folders on sys.path; each test gets the suite's path back after."""
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.fixture
def tutorial(tmp_path):
    folder = tmp_path / "analysis"
    folder.mkdir()
    (folder / "my_analysis.py").write_text(TUTORIAL_MODULES)
    (folder / "mine.yaml").write_text(TUTORIAL_CONFIG)
    return folder


def _leading(files) -> np.ndarray:
    values = []
    for path in files:
        with uproot.open(path) as handle:
            pt = handle["Events"]["Jet_pt"].array()
        values.append(ak.to_numpy(ak.fill_none(ak.max(pt, axis=1), 0.0)))
    return np.concatenate(values)


def test_tutorial_runs_from_the_cli_from_another_folder(tutorial, nano_files, sonic_cli, tmp_path):
    out = tmp_path / "out.root"
    result = sonic_cli("run", tutorial / "mine.yaml", "-i", *nano_files, "-o", out, "--no-progress", cwd=tmp_path,
                       check=True, timeout=120)
    lead = _leading(nano_files)
    expected = lead[lead > 80.0]
    with uproot.open(out) as handle:
        written = handle["Events"]["lead_pt"].array(library="np")
    assert 0 < len(written) < len(lead)
    assert np.allclose(written, expected, rtol=1e-6)
    assert "HardEvent" in result.stdout and "LeadingJetPt" in result.stdout


def test_tutorial_through_the_python_api_and_run_module(tutorial, nano_files, monkeypatch):
    monkeypatch.syspath_prepend(str(tutorial))
    result = run(tutorial / "mine.yaml", {"source.files": [str(f) for f in nano_files]})
    lead = _leading(nano_files)
    assert result.events == len(lead) and result.written == int(np.sum(lead > 80.0))
    assert (result.modules["hard"].passed, result.modules["hard"].failed) == \
        (result.written, len(lead) - result.written)

    # the project's testing helper, as docs/modules.md shows
    from my_analysis import HardEvent, LeadingJetPt

    from sonic_hep.framework.testing import run_module

    jets = ak.Array([{"pt": [50.0, 120.0]}, {"pt": []}, {"pt": [90.0]}])
    producer = run_module(LeadingJetPt, {"Jet": jets}, label="lead")
    assert producer.products["pt"] == [120.0, 0.0, 90.0]
    hard = run_module(HardEvent, {"lead:pt": np.array([120.0, 0.0, 90.0])}, min_pt=100.0)
    assert hard.passed == [True, False, False]
    with pytest.raises(ParamError, match="min_pt"):
        run_module(HardEvent, {"lead:pt": np.array([1.0])}, min_pt="high")


def test_dotted_type_without_imports_and_describe_lists_the_file(tutorial, nano_files, sonic_cli, tmp_path):
    config = yaml.safe_load(TUTORIAL_CONFIG)
    del config["imports"]
    config["modules"]["lead"]["type"] = "my_analysis.LeadingJetPt"
    config["modules"]["hard"]["type"] = "my_analysis.HardEvent"
    (tutorial / "dotted.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "dotted.root"
    sonic_cli("run", tutorial / "dotted.yaml", "-i", *nano_files, "-o", out, "--no-progress", "-q", cwd=tmp_path,
              check=True, timeout=120)
    with uproot.open(out) as handle:
        assert handle["Events"].num_entries == int(np.sum(_leading(nano_files) > 80.0))
    listing = sonic_cli("describe", "--config", tutorial / "mine.yaml", cwd=tmp_path, check=True).stdout
    line = next(line for line in listing.splitlines() if line.startswith("HardEvent "))
    assert "filter" in line and "my_analysis.py" in line
    assert any(line.startswith("CollectionSum ") for line in listing.splitlines())  # plug-ins still listed
    one = sonic_cli("describe", "my_analysis.HardEvent", cwd=tutorial, check=True).stdout
    assert "min_pt" in one and "threshold in GeV" in one


def test_grid_configs_carry_the_file_as_an_absolute_path(tutorial):
    config = load(tutorial / "mine.yaml")
    assert config.raw["imports"] == [str((tutorial / "my_analysis.py").resolve())]
    assert lookup("CollectionSum").__name__ == "CollectionSum"  # entry-point plug-ins keep working


@pytest.mark.parametrize("imports, module_type, expected", [
    (["nothere"], "LeadingJetPt", r"mine\.yaml:2: imports: module 'nothere' not found: no nothere\.py"),
    (["lib/cuts.py"], "LeadingJetPt", r"imports: module file 'lib/cuts\.py' not found \(looked for .*lib/cuts\.py\)"),
    ([], "my_analysis.LeadingJetPtt", r"modules\.lead\.type: 'my_analysis' \(.*my_analysis\.py\) has no class "
                                      r"'LeadingJetPtt' \(did you mean 'LeadingJetPt'"),
    ([], "nothere.LeadingJetPt", r"modules\.lead\.type: module 'nothere' not found"),
    ([], "MyOwnThing", r"unknown module type 'MyOwnThing'.*list the file under imports, "
                       r"or write type: file\.MyOwnThing"),
    (["broken"], "LeadingJetPt", r"imports: importing 'broken' failed: SyntaxError: .*broken\.py, line 2\)"),
    (["json"], "LeadingJetPt", r"imports: json\.py in .* has the name of a module already imported from .*json"),
])
def test_missing_module_file_or_class_is_one_line(tutorial, nano_files, imports, module_type, expected):
    (tutorial / "broken.py").write_text("x = 1\ndef oops(:\n")
    (tutorial / "json.py").write_text("x = 1\n")  # would replace the json everyone imported
    config = _broken_config(tutorial, imports, module_type)
    with pytest.raises(ConfigError) as info:
        Process(load(config, [f"source.files=['{nano_files[0]}']"]))
    message = str(info.value)
    assert "\n" not in message and re.search(expected, message), message


def test_a_bad_import_through_the_cli_is_one_line_and_exit_1(tutorial, nano_files, sonic_cli, tmp_path):
    config = _broken_config(tutorial, ["nothere"], "LeadingJetPt")
    result = sonic_cli("run", config, "-i", nano_files[0], "--no-progress", cwd=tmp_path, timeout=120)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"sonic: error: {config}:2: imports: module 'nothere' not found: no nothere.py or package nothere/ in "
        f"{tutorial.resolve()}, and not importable from PYTHONPATH"]


def _broken_config(tutorial, imports, module_type):
    config = yaml.safe_load(TUTORIAL_CONFIG)
    config["imports"] = imports
    config["modules"]["lead"]["type"] = module_type
    path = tutorial / "mine.yaml"
    path.write_text("process: mine\n" + yaml.safe_dump({k: v for k, v in config.items() if k != "process"},
                                                       sort_keys=False))
    return path


def test_grid_jobs_import_the_users_file_from_their_task_folder(tutorial, nano_files, sonic_cli, tmp_path):
    task_dir = tmp_path / "task"
    sonic_cli("submit", tutorial / "mine.yaml", "--input", *nano_files, "--output-dir", task_dir,
              "--files-per-job", "1", "--wait", "--timeout", "120", cwd=tmp_path, check=True, timeout=180)
    saved = yaml.safe_load((task_dir / "config.yaml").read_text())
    assert saved["imports"] == [str((tutorial / "my_analysis.py").resolve())]
    lead = _leading(nano_files)
    written = []
    for output in sorted(task_dir.glob("jobs/*/output.root")):
        with uproot.open(output) as handle:
            written.append(handle["Events"]["lead_pt"].array(library="np"))
    assert len(written) == len(nano_files)
    assert np.allclose(np.concatenate(written), lead[lead > 80.0], rtol=1e-6)


def test_a_refused_namesake_of_an_imported_module_leaves_sys_path_alone(tutorial):
    # the folder went on sys.path before the refusal: Dask workers and multiprocessing children started later
    # in the process inherited it and imported this json.py instead of the real json
    (tutorial / "json.py").write_text("x = 1\n")
    before = list(sys.path)
    with pytest.raises(UserModuleError, match="rename your file"):
        import_user_module("json", tutorial)
    assert sys.path == before


def test_the_docs_show_the_tutorial_this_file_runs():
    page = (Path(__file__).resolve().parents[2] / "docs" / "modules.md").read_text()
    assert TUTORIAL_MODULES in page and TUTORIAL_CONFIG in page
