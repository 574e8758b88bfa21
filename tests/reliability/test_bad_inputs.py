"""A table of bad inputs a user or an operator can give ``sonic`` (configuration, inputs, outputs, inference,
grid, command line). Each row runs the real command line in a fresh folder and asserts

* the exit code the README documents (1 a user error, 2 a bad command line or files ``sonic compare``
  cannot read),
* one line of error on stderr (log lines aside) that names the culprit, and no traceback,
* that nothing that looks complete is left: every file in the folder (and in the grid task used by the grid
  rows) is byte-for-byte and name-for-name as it was before the command.

The rows run a few at a time (each is a separate ``sonic`` process of ~1 s).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import uproot
import yaml

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from tests.framework.conftest import write_nano

SONIC = [sys.executable, "-m", "sonic_hep.workflows.cli"]
DEMO = ["run", "demo_inference", "-n", "5", "--no-progress", "-q", "-o", "inf.root"]


@dataclass(frozen=True)
class Row:
    """One bad input: the arguments (``{task}`` is the finished grid task), the exit code, the culprit."""

    id: str
    args: tuple[str, ...]
    code: int
    culprit: str  # a regular expression the error line must match

    def command(self, task: Path) -> list[str]:
        return [*SONIC, *(a.replace("{task}", str(task)) for a in self.args)]


def row(id: str, *args: str, code: int = 1, culprit: str) -> Row:
    return Row(id, args, code, culprit)


ROWS = [
    # -- configuration ------------------------------------------------------------------------------------
    row("config-missing", "run", "nope.yaml", culprit=r"nope\.yaml: configuration file not found"),
    row("config-is-a-directory", "run", "folder", culprit=r"folder: is a directory"),
    row("config-not-utf8", "run", "x.root", culprit=r"x\.root: not a YAML configuration: byte \d+ is not UTF-8"),
    row("config-yaml-syntax", "run", "syntax.yaml", culprit=r"syntax\.yaml:\d+: YAML syntax error"),
    row("config-top-level-list", "run", "list.yaml", culprit=r"list\.yaml:1: the top level must be a mapping"),
    row("config-unknown-section", "run", "cfg.yaml", "-p", "sources.files=[x.root]",
        culprit=r"unknown section or module label 'sources'.*did you mean 'source'"),
    row("config-unknown-module-type", "run", "typo.yaml", culprit=r"typo\.yaml:\d+: modules\.ht\.type: .*'CollectionSum'"),
    row("config-unknown-parameter", "run", "cfg.yaml", "-p", "ht.min_ptt=3",
        culprit=r"<command line>: modules\.ht\.min_ptt: unknown parameter"),
    row("config-wrong-type-in-file", "run", "wrongtype.yaml", culprit=r"wrongtype\.yaml:\d+: modules\.ht\.min_pt: expected float"),
    row("config-p-value-blames-command-line", "run", "wrongtype.yaml", "-p", "ht.min_pt=abc",
        culprit=r"<command line>: modules\.ht\.min_pt: expected float, got str 'abc'"),
    row("config-p-without-equals", "run", "cfg.yaml", "-p", "ht.min_pt", culprit=r"override 'ht\.min_pt' must look like"),
    row("config-missing-required", "run", "cfg.yaml", "-p", "modules.h={type: Histogram1D}",
        culprit=r"modules\.h\.src: missing required parameter"),
    row("config-duplicate-key", "run", "duplicate.yaml", culprit=r"duplicate\.yaml:\d+: duplicate key 'ht'"),
    row("config-path-unknown-label", "run", "cfg.yaml", "-p", "path=[ht, nope]", culprit=r"path: unknown module label 'nope'"),
    row("config-threads-absurd", "run", "cfg.yaml", "-t", "100000", culprit=r"options\.threads: must be at most 1024"),
    row("config-streams-zero", "run", "cfg.yaml", "-s", "0", culprit=r"options\.streams: must be at least 1"),
    row("config-max-events-negative", "run", "cfg.yaml", "-n", "-5", culprit=r"source\.max_events: must be at least -1"),
    row("config-first-entry-negative", "run", "cfg.yaml", "--first-entry", "-5",
        culprit=r"source\.first_entry: must be at least 0, got -5"),
    row("config-products-match-nothing", "run", "cfg.yaml", "-p", "output.products=['nope:*']",
        culprit=r"output\.products: 'nope:\*' matches no product"),
    row("config-product-nobody-makes", "run", "cfg.yaml", "-p", "modules.h={type: Histogram1D, src: 'nope:value'}",
        culprit=r"nope:value"),
    row("config-compression-unknown", "run", "cfg.yaml", "-p", "output.compression=zip:9", culprit=r"unknown compression 'zip:9'"),
    row("config-histograms-without-output", "run", "hist.yaml", "-i", "x.root",
        culprit=r"output\.file: module\(s\) h fill histograms, but there is no output file"),
    row("config-yaml-alias-bomb", "run", "bomb.yaml", culprit=r"bomb\.yaml:\d+: YAML aliases expand the configuration by more than"),
    row("config-yaml-alias-loop", "run", "loop.yaml", culprit=r"loop\.yaml:\d+: a YAML alias refers to a mapping or list that holds it"),
    row("config-yaml-nested-too-deeply", "run", "deep.yaml", culprit=r"deep\.yaml: YAML lists or mappings nested too deeply"),
    row("config-path-entry-not-a-label", "run", "pathlist.yaml", culprit=r"pathlist\.yaml:\d+: path: expected module labels, got list \['ht'\]"),
    row("config-timing-json-not-a-name", "run", "cfg.yaml", "-p", "services.timing.json=[t.json]",
        culprit=r"<command line>: services\.timing\.json: expected a file name, got list"),
    # -- inputs -------------------------------------------------------------------------------------------
    row("input-missing", "run", "cfg.yaml", "-i", "nope.root", culprit=r"input file 'nope\.root' does not exist"),
    row("input-glob-matches-nothing", "run", "cfg.yaml", "-i", "none*.root", culprit=r"no input file matches 'none\*\.root'"),
    row("input-not-root", "run", "cfg.yaml", "-i", "cfg.yaml", culprit=r"cannot open 'cfg\.yaml' as a ROOT file"),
    row("input-truncated-root", "run", "cfg.yaml", "-i", "truncated.root", culprit=r"'truncated\.root'"),
    row("input-is-a-directory", "run", "cfg.yaml", "-i", "folder", culprit=r"'folder'"),
    row("input-no-such-tree", "run", "cfg.yaml", "-p", "source.tree=Evts", culprit=r"has no tree or RNTuple 'Evts'.*'Events'"),
    row("input-no-such-branch", "run", "cfg.yaml", "-i", "noid.root", culprit=r"branch 'Jet_\w+' is not in 'noid\.root'"),
    row("input-first-entry-past-end", "run", "cfg.yaml", "--first-entry", "1000",
        culprit=r"source\.first_entry 1000 is past the end of the input: 'x\.root' has 20 entries"),
    row("input-none-given", "run", "typo.yaml", "-p", "ht.type=CollectionSum", "-p", "source.files=[]",
        culprit=r"no input files"),
    # -- outputs ------------------------------------------------------------------------------------------
    row("output-is-the-input", "run", "cfg.yaml", "-o", "x.root", culprit=r"output file 'x\.root' is also an input file"),
    row("output-is-the-config", "run", "cfg.yaml", "-o", "cfg.yaml", culprit=r"output file 'cfg\.yaml' is also the configuration"),
    row("output-is-a-directory", "run", "cfg.yaml", "-o", "folder", culprit=r"output file 'folder' is an existing directory"),
    row("output-folder-missing", "run", "cfg.yaml", "-o", "nodir/out.root", culprit=r"output file 'nodir/out\.root': folder .* does not exist"),
    # a FIFO of the row's own, never /dev/null: code without the check (as root) would rename a file over it
    row("output-not-a-regular-file", "run", "cfg.yaml", "-o", "fifo", culprit=r"'fifo' exists and is not a regular file"),
    row("output-timing-json-folder-missing", "run", "cfg.yaml", "--timing-json", "nodir/t.json",
        culprit=r"timing JSON 'nodir/t\.json': folder .* does not exist"),
    row("output-timing-json-is-a-directory", "run", "cfg.yaml", "--timing-json", "folder",
        culprit=r"timing JSON 'folder' is an existing directory"),
    row("output-timing-json-is-the-output", "run", "cfg.yaml", "--timing-json", "out.root",
        culprit=r"output file 'out\.root' is also the timing JSON"),
    row("output-timing-json-is-the-input", "run", "cfg.yaml", "--timing-json", "x.root",
        culprit=r"timing JSON 'x\.root' is also an input file"),
    # -- inference ----------------------------------------------------------------------------------------
    row("inference-mode-unknown", *DEMO, "-p", "services.inference.mode=bogus",
        culprit=r"services\.inference\.mode: 'bogus' is not one of"),
    row("inference-timeout-negative", *DEMO, "-p", "services.inference.timeout_s=-1",
        culprit=r"services\.inference\.timeout_s: must be a positive number of seconds, got -1"),
    row("inference-allowed-tries-zero", *DEMO, "-p", "services.inference.allowed_tries=0",
        culprit=r"services\.inference\.allowed_tries: must be at least 1"),
    row("inference-unknown-setting", *DEMO, "-p", "services.inference.timeout=3",
        culprit=r"services\.inference\.timeout: unknown key \(did you mean 'timeout_s'"),
    row("inference-unknown-service", *DEMO, "-p", "services.bogus.x=1", culprit=r"unknown service 'bogus'"),
    row("inference-repository-missing", *DEMO, "-p", "services.inference.repository=[/nonexistent/models]",
        culprit=r"model repository '/nonexistent/models' does not exist"),
    row("inference-model-unknown", *DEMO, "-p", "tagger.model=nope", culprit=r"model 'nope' is in no repository"),
    row("inference-fallback-option-unknown", *DEMO, "-p", "services.inference.fallback_server.bogus=1",
        culprit=r"services\.inference\.fallback_server\.bogus: unknown fallback server option"),
    row("inference-server-not-host-port", *DEMO, "--inference", "sonic", "--server", "notaport",
        "-p", "services.inference.fallback=false", culprit=r"server 'notaport' must look like HOST:PORT"),
    row("inference-server-unreachable", *DEMO, "--inference", "sonic", "--server", "127.0.0.1:9",
        "-p", "services.inference.fallback=false", culprit=r"no server can run model 'demo_mlp': 127\.0\.0\.1:9: down"),
    row("inference-instance-count-absurd", "server", "start", "-r", "absurd",
        culprit=r"model 'demo_sum': instance_group count 10000 \(KIND_CPU\) is more than this server can run: .*absurd/demo_sum"),
    # -- grid ---------------------------------------------------------------------------------------------
    row("grid-status-not-a-task", "status", "folder", culprit=r"'folder' is not a task directory"),
    row("grid-merge-not-a-task", "merge", "folder", "--output", "m.root", culprit=r"'folder' is not a task directory"),
    row("grid-resubmit-not-a-task", "resubmit", "folder", culprit=r"'folder' is not a task directory"),
    row("grid-submit-executor-option-unknown", "submit", "cfg.yaml", "--output-dir", "T", "-E", "foo=bar",
        culprit=r"executor 'local' has no option 'foo'"),
    row("grid-submit-executor-option-not-yaml", "submit", "cfg.yaml", "--output-dir", "T", "-x", "slurm", "-E", "extra=[",
        culprit=r"executor 'slurm' option 'extra': cannot parse value '\['"),
    row("grid-merge-into-a-job-folder", "merge", "{task}", "--output", "{task}/jobs/0000/output.root",
        culprit=r"merge --output .*/jobs/0000/output\.root' lies inside the task"),
    row("grid-merge-over-an-input", "merge", "{task}", "--output", "{task}/../x.root",
        culprit=r"merge --output '.*x\.root' is an input of the task"),
    row("grid-merge-into-a-directory", "merge", "{task}", "--output", "folder", culprit=r"merge --output 'folder' is a directory"),
    row("grid-submit-events-per-job-zero", "submit", "cfg.yaml", "--output-dir", "T0", "--events-per-job", "0",
        culprit=r"--events-per-job must be at least 1, got 0"),
    row("grid-submit-files-per-job-negative", "submit", "cfg.yaml", "--output-dir", "T0", "--files-per-job", "-2",
        culprit=r"--files-per-job must be at least 1, got -2"),
    row("grid-status-corrupt-task-record", "status", "broken", culprit=r"broken/task\.json is not a readable record"),
    # -- command line -------------------------------------------------------------------------------------
    row("cli-unknown-command", "bogus", code=2, culprit=r"invalid choice: 'bogus'"),
    row("cli-run-without-config", "run", code=2, culprit=r"sonic run: error: the following arguments are required: config"),
    row("cli-not-an-int", "run", "cfg.yaml", "-n", "abc", code=2, culprit=r"argument --max-events/-n: invalid int value: 'abc'"),
    row("cli-describe-unknown-type", "describe", "CollectionSumm", culprit=r"'CollectionSumm'.*did you mean 'CollectionSum'"),
    row("cli-compare-missing-file", "compare", "nope.root", "x.root", code=2, culprit=r"'nope\.root': no such file"),
    row("cli-compare-not-root", "compare", "cfg.yaml", "x.root", code=2, culprit=r"'cfg\.yaml' is not a readable ROOT file"),
    row("cli-compare-no-such-tree", "compare", "x.root", "x.root", "--tree", "Event", code=2,
        culprit=r"'x\.root' has no tree 'Event' \(did you mean 'Events'\?\)"),
    row("cli-graph-dot-folder-missing", "graph", "cfg.yaml", "--dot", "nodir/g.dot",
        culprit=r"--dot 'nodir/g\.dot': folder .* does not exist"),
    row("cli-graph-dot-is-the-config", "graph", "cfg.yaml", "--dot", "cfg.yaml",
        culprit=r"--dot 'cfg\.yaml' is also the configuration file"),
    row("cli-generate-output-folder-missing", "data", "generate", "protodune", "-n", "1", "-o", "nodir/x.root",
        culprit=r"output directory '.*nodir' does not exist"),
]


def make_folder(folder: Path) -> None:
    """The files every row starts from."""
    folder.mkdir()
    write_nano(folder / "x.root", 20, seed=1)
    with uproot.recreate(folder / "noid.root") as f:
        f["Events"] = {"MET_pt": np.arange(20, dtype=np.float32)}
    (folder / "truncated.root").write_bytes((folder / "x.root").read_bytes()[:3000])
    (folder / "folder").mkdir()
    dump = lambda name, data: (folder / name).write_text(yaml.safe_dump(data, sort_keys=False))  # noqa: E731
    dump("cfg.yaml", {"source": {"files": ["x.root"]}, "modules": {"ht": {"type": "CollectionSum"}},
                      "output": {"file": "out.root", "products": ["ht:*"]}})
    dump("hist.yaml", {"modules": {"h": {"type": "Histogram1D", "src": "MET_pt"}}})
    dump("typo.yaml", {"source": {"files": ["x.root"]}, "modules": {"ht": {"type": "CollectionSumm"}}})
    dump("wrongtype.yaml", {"source": {"files": ["x.root"]}, "modules": {"ht": {"type": "CollectionSum", "min_pt": "x"}}})
    (folder / "syntax.yaml").write_text("modules:\n  ht: {type: CollectionSum\n")
    (folder / "list.yaml").write_text("- modules\n")
    (folder / "broken").mkdir()
    (folder / "broken" / "task.json").write_text('{"format": 1, "config"')  # cut short
    (folder / "duplicate.yaml").write_text("modules:\n  ht: {type: CollectionSum}\n  ht: {type: CollectionSum}\n")
    # ten times ten times ... (a million values) from a few lines; code that copies the configuration expands it
    levels = ["    l0: &l0 [" + ", ".join(["lol"] * 10) + "]"]
    levels += [f"    l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 6)]
    (folder / "bomb.yaml").write_text("modules:\n  ht:\n    type: CollectionSum\n" + "\n".join(levels) + "\n")
    (folder / "loop.yaml").write_text("modules:\n  ht: &ht {type: CollectionSum, min_pt: [1, *ht]}\n")
    (folder / "deep.yaml").write_text("modules:\n  ht: {type: CollectionSum, min_pt: " + "[" * 3000 + "]" * 3000 + "}\n")
    (folder / "pathlist.yaml").write_text("modules:\n  ht: {type: CollectionSum}\npath: [[ht], ht]\n")
    shutil.copytree(DEMO_REPOSITORY / "demo_sum", folder / "absurd" / "demo_sum")
    config = folder / "absurd" / "demo_sum" / "config.pbtxt"
    config.write_text(config.read_text().replace("count: 1\n", "count: 10000\n"))


def snapshot(*folders: Path) -> dict[str, str]:
    """Every file under ``folders`` with a digest of its bytes (folders as entries too)."""
    found: dict[str, str] = {}
    for folder in folders:
        for root, dirs, files in os.walk(folder):
            for name in dirs:
                found[os.path.join(root, name) + "/"] = ""
            for name in files:
                path = os.path.join(root, name)
                if not os.path.isfile(path) or os.path.islink(path):  # the FIFO: never read (it would block)
                    found[path] = f"special {os.lstat(path).st_mode:o}"
                    continue
                found[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return found


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, tuple[Row, subprocess.CompletedProcess, dict, dict]]:
    """Runs every row (3 at a time) in its own copy of the starting folder; returns what each left."""
    base = tmp_path_factory.mktemp("bad-inputs")
    template = base / "template"
    make_folder(template)
    task_home = base / "task-home"
    shutil.copytree(template, task_home)
    submitted = subprocess.run([*SONIC, "submit", "cfg.yaml", "-i", "x.root", "--output-dir", "T", "--wait"],
                               cwd=task_home, capture_output=True, text=True, timeout=300)
    assert submitted.returncode == 0, submitted.stderr
    task = task_home / "T"

    def run(r: Row) -> tuple[Row, subprocess.CompletedProcess, dict, dict]:
        folder = base / r.id
        shutil.copytree(template, folder)
        os.mkfifo(folder / "fifo")
        before = snapshot(folder, task)
        try:
            result = subprocess.run(r.command(task), cwd=folder, capture_output=True, text=True, timeout=180)
        except subprocess.TimeoutExpired as err:
            result = subprocess.CompletedProcess(err.cmd, -1, "", f"timed out after {err.timeout} s")
        return r, result, before, snapshot(folder, task)

    with ThreadPoolExecutor(3) as pool:
        return {out[0].id: out for out in pool.map(run, ROWS)}


def test_the_table_is_large_and_covers_every_area():
    areas = {r.id.split("-")[0] for r in ROWS}
    assert len(ROWS) >= 40 and len({r.id for r in ROWS}) == len(ROWS)
    assert areas == {"config", "input", "output", "inference", "grid", "cli"}


@pytest.mark.parametrize("bad", ROWS, ids=[r.id for r in ROWS])
def test_bad_input(results, bad):
    _, result, before, after = results[bad.id]
    where = f"{' '.join(bad.args)}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert result.returncode == bad.code, where
    assert "Traceback" not in result.stderr, where
    lines = [line for line in result.stderr.splitlines() if line.startswith("sonic")]
    assert len(lines) == 1, where  # the error, on one line (log lines, e.g. warnings, aside)
    assert re.search(bad.culprit, lines[0]), where
    assert after == before, f"files changed or left: {sorted(set(after.items()) ^ set(before.items()))}\n{where}"
