"""Command-line habits a CMSSW or ROOT user brings: ``--version``, ``-v`` anywhere, options
before the configuration, readable help and listings, one-line argument errors everywhere, no server started
for nothing, a final table after ``--wait``, and a merge that never replaces a file silently."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import pytest
import uproot
import yaml

from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.process import Process
from sonic_hep.workflows.cli import plain
from sonic_hep.workflows.cli._lazy import discover
from sonic_hep.workflows.cli.describe import summary
from tests.grid.samples import write_nano

GENERATOR = {"source": {"type": "empty", "events": 30, "chunk_size": 10}, "modules": {"value": {"type": "NullProducer"}}}


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_version(sonic_cli):
    result = sonic_cli("--version", check=True)
    assert result.stdout.strip() == f"sonic-hep {version('sonic-hep')}"


def test_verbose_after_the_sub_command_shows_the_traceback(tmp_path, sonic_cli):
    quiet = sonic_cli("run", "missing.yaml", cwd=tmp_path)
    assert quiet.returncode == 1 and "Traceback" not in quiet.stderr
    for args in (("-v", "run", "missing.yaml"), ("run", "missing.yaml", "-v"), ("run", "-v", "missing.yaml")):
        loud = sonic_cli(*args, cwd=tmp_path)
        assert loud.returncode != 2 and "Traceback" in loud.stderr, (args, loud.stderr)
        assert "configuration file not found" in loud.stderr
    assert sonic_cli("describe", "NullProducer", "-v", check=True).stdout.startswith("NullProducer")


def test_config_after_input_files(tmp_path, sonic_cli):
    inputs = [write_nano(tmp_path / "a.root", 40, seed=1), write_nano(tmp_path / "b.root", 25, seed=2)]
    config = write(tmp_path / "sum.yaml", {"source": {"files": ["placeholder.root"]},
                                           "modules": {"ht": {"type": "CollectionSum"}},
                                           "output": {"products": ["ht:sum"]}})
    sonic_cli("run", "-i", *inputs, config, "-o", tmp_path / "out.root", "-q", "--no-progress", cwd=tmp_path,
              check=True)
    with uproot.open(tmp_path / "out.root") as out:
        assert out["Events"].num_entries == 65  # both files read, the YAML taken as the configuration
    shipped = sonic_cli("run", "-i", inputs[0], "demo_inference", "-n", "0", "--no-progress", cwd=tmp_path)
    assert "required: config" not in shipped.stderr  # a shipped configuration's name is recognised
    file_list = tmp_path / "files.txt"
    file_list.write_text("a.root\n")
    for args in (("-i", *inputs), ("-i", inputs[0], file_list), ("-i", inputs[0]), ()):  # inputs, not configurations
        missing = sonic_cli("run", *args, cwd=tmp_path)
        assert missing.returncode == 2 and missing.stderr.count("\n") == 1
        assert missing.stderr.startswith("sonic run: error: the following arguments are required: config")
    usage = sonic_cli("run", "--help", check=True).stdout.split("\n\n")[0]
    assert usage.split()[-1] == "config"  # shown as required, not [config]


@pytest.mark.parametrize("text, expected", [
    ("Keeps ``min_count`` objects", "Keeps min_count objects"),
    ("see :class:`~sonic_hep.framework.errors.ExitCode`", "see ExitCode"),
    ("see :mod:`.working_point` and :func:`the helper <a.b.c>`", "see working_point and the helper"),
    ("*weighted* and **summed**, 3 * 4 = a*b*c", "weighted and summed, 3 * 4 = a*b*c"),
    ("Follow with ``sonic status\nDIR``.", "Follow with sonic status\nDIR."),  # wrapped in the docstring
])
def test_plain_removes_rest_markup(text, expected):
    assert plain(text) == expected


def test_summary_is_the_first_sentence_of_the_first_paragraph():
    doc = """DeepTau scores for every τ candidate. Products: ``scores`` — per τ: e, mu and
    CMS's discriminants.

    More detail."""
    assert summary(doc) == "DeepTau scores for every τ candidate."
    assert summary("A sum above a threshold (e.g. HT from\n  jets), per event") == \
        "A sum above a threshold (e.g. HT from jets), per event"


def test_describe_listing_is_plain_one_liners(sonic_cli):
    listing = sonic_cli("describe", check=True).stdout.splitlines()
    assert len(listing) > 10
    assert [line for line in listing if "`" in line] == []
    deeptau = next(line for line in listing if line.startswith("DeepTauProducer "))
    assert deeptau.endswith("DeepTau scores for every τ candidate.")  # its first line ends mid-sentence
    assert "``" not in sonic_cli("describe", "MinCountFilter", check=True).stdout


@pytest.mark.parametrize("command, example", [(("bench",), "sonic bench miniaod --events 200"),
                                              (("data",), "sonic data generate miniaod --events 50"),
                                              (("data", "generate"), "sonic data generate miniaod --events 50")])
def test_bench_and_data_help_describe_usage(sonic_cli, command, example):
    text = sonic_cli(*command, "--help", check=True).stdout
    assert example in text
    assert "add_arguments" not in text and "discovers" not in text and "`" not in text


@pytest.mark.parametrize("args, culprit", [
    (("bench", "framework", "--bogus"), "sonic bench framework: error: unrecognized arguments: --bogus"),
    (("data", "generate", "protodune", "--events", "x"), "sonic data generate protodune: error: argument --events"),
    (("bench",), "sonic bench: error: the following arguments are required: NAME"),
])
def test_bench_and_data_argument_errors_are_one_line(sonic_cli, args, culprit):
    result = sonic_cli(*args)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(culprit), result.stderr


@pytest.mark.parametrize("name", [name for name, _ in discover("sonic_hep.data", suffix=".generate")])
def test_every_generator_takes_the_same_spellings_of_events_and_output(sonic_cli, name):
    """``-o`` worked for one generator and was refused by another: the same words everywhere."""
    text = sonic_cli("data", "generate", name, "--help", check=True).stdout
    for option in ("--events EVENTS, -n EVENTS", "--output OUTPUT, -o OUTPUT", "--seed SEED"):
        assert option in text, f"sonic data generate {name} lacks {option!r}:\n{text}"


def test_bench_takes_verbose_after_its_name(sonic_cli):
    assert "-v, --verbose" in sonic_cli("bench", "framework", "--help", check=True).stdout


def test_inference_service_not_started_when_no_module_uses_it(tmp_path, sonic_cli):
    path = write(tmp_path / "gen.yaml", GENERATOR)
    settings = ["services.inference.mode=sonic", "services.inference.servers=['127.0.0.1:9']",
                "services.inference.fallback=false"]
    assert Process(cfgmod.load(str(path), settings)).services == {}
    with pytest.raises(Exception, match="timeout_s"):  # still checked: a typo in an unused section is an error
        Process(cfgmod.load(str(path), [*settings, "services.inference.timeout_s=-1"]))
    assert list(Process(cfgmod.load("demo_inference", settings)).services) == ["inference"]  # ToyTagger uses it

    result = sonic_cli("run", path, "--inference", "sonic", "--server", "127.0.0.1:9", "-q", "--no-progress",
                       "-p", "services.inference.fallback=false", cwd=tmp_path, check=True)
    assert "services.inference: no module of this job uses it; not started" in result.stderr
    assert "processed 30 events" in result.stderr


@pytest.fixture
def finished_task(tmp_path, sonic_cli) -> tuple[Path, str]:
    """A task of three generator jobs submitted with --wait; (task directory, what --wait printed)."""
    config = write(tmp_path / "gen.yaml", GENERATOR)
    result = sonic_cli("submit", config, "-d", tmp_path / "task", "--events-per-job", "10", "--wait",
                       "--timeout", "120", cwd=tmp_path, check=True)
    return tmp_path / "task", result.stdout


def test_submit_wait_prints_every_job_in_the_final_table(finished_task):
    _, table = finished_task
    rows = [line.split() for line in table.splitlines() if re.match(r"\s+\d+ ", line)]
    assert [(row[0], row[1]) for row in rows] == [("0", "done"), ("1", "done"), ("2", "done")]
    assert "30 events" in table


def test_merge_never_replaces_a_file_silently(finished_task, tmp_path, sonic_cli):
    task, _ = finished_task
    target = tmp_path / "merged.root"
    sonic_cli("merge", task, "-o", target, cwd=tmp_path, check=True)
    first = target.read_bytes()
    target.write_bytes(b"an earlier result")
    refused = sonic_cli("merge", task, "-o", target, cwd=tmp_path)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith(f"sonic: error: merge --output {str(target)!r} exists") and "--force" in refused.stderr
    assert target.read_bytes() == b"an earlier result"
    replaced = sonic_cli("merge", task, "-o", target, "--force", cwd=tmp_path, check=True)
    assert "(replaced)" in replaced.stderr
    with uproot.open(target) as merged:
        assert merged["Events"].num_entries == 30 and len(target.read_bytes()) > 0 and first[:4] == b"root"
    directory = sonic_cli("merge", task, "-o", tmp_path, cwd=tmp_path)  # exists, but refused for what it is
    assert directory.returncode == 1 and "is a directory" in directory.stderr
