"""Batch scripts carry no raw text: a name with a line break cannot add a line of shell, a path with spaces
stays one value, and what cannot be made safe is refused with one line naming it."""

from __future__ import annotations

import shlex

import pytest
import yaml

from sonic_hep.workflows.grid.batch_text import condor_arguments, job_name, sbatch_option, sbatch_value
from sonic_hep.workflows.grid.errors import GridError
from sonic_hep.workflows.grid.executors import executor_class
from sonic_hep.workflows.grid.merge import merge
from sonic_hep.workflows.grid.status import wait
from sonic_hep.workflows.grid.submit import SubmitRequest, prepare, submit
from tests.grid.conftest import single_run
from tests.grid.samples import analysis_config, assert_same_events

PAYLOAD = "touch {marker}"


def hostile_config(tmp_path, marker) -> str:
    """A config whose process name ends the #SBATCH line and runs a command."""
    config = analysis_config(tmp_path / "analysis.yaml")
    raw = yaml.safe_load(config.read_text())
    raw["process"] = f"x\n{PAYLOAD.format(marker=marker)}\n#"
    config.write_text(yaml.safe_dump(raw))
    return str(config)


def directives(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith("#SBATCH")]


@pytest.fixture
def hostile_task(tmp_path, inputs):
    """A task whose process name holds a line of shell and whose directory holds quotes, spaces and a macro."""
    return prepare(SubmitRequest(config=hostile_config(tmp_path, tmp_path / "pwned"), inputs=[str(inputs[0])],
                                 output_dir=str(tmp_path / 'my "task" $(id) dir')))


def test_names_are_sanitised_and_paths_quoted_in_the_slurm_script(tmp_path, hostile_task):
    marker, task = tmp_path / "pwned", hostile_task
    script = executor_class("slurm")(task, {"partition": "debug", "extra": ["--comment=a b"]}).script([0], 0, 2)
    lines = script.splitlines()
    assert not any(str(marker) in line and not line.startswith("#") for line in lines), script
    assert "#SBATCH --job-name=sonic-x_touch_" in script
    output = next(line for line in lines if line.startswith("#SBATCH --output="))
    assert output == f'#SBATCH --output="{task.directory}/logs/slurm-%A_%a.out"'.replace('"task"', '\\"task\\"')
    assert '#SBATCH --comment="a b"' in script and "#SBATCH --partition=debug" in script
    exec_line = next(line for line in lines if line.startswith("exec "))
    assert shlex.split(exec_line)[4] == str(task.directory)  # one word, as given


def test_names_are_sanitised_and_paths_quoted_in_the_condor_description(hostile_task):
    htcondor2 = pytest.importorskip("htcondor2")
    task = hostile_task
    condor = executor_class("condor")(task, {})
    desc = condor.description(None)
    assert "\n" not in "".join(desc.values()) and desc["batch_name"].startswith("sonic-x_touch_")
    parsed = htcondor2.Submit(condor.submit_file(None, [0]))
    assert parsed.expand("MY.SonicTask") == '"' + str(task.directory).replace('"', '\\"') + '"'
    parsed["job_index"] = "0"
    assert parsed.expand("job_dir") == str(task.files(0).directory)  # $(id) is not a macro here
    words = parsed.expand("arguments")
    assert words.startswith('"') and f"'{task.directory}'".replace('"', '""') in words


@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\x00b", "a\u2028b"])
def test_a_task_directory_with_a_line_break_is_refused_in_one_line(tmp_path, inputs, bad):
    with pytest.raises(GridError) as refused:
        prepare(SubmitRequest(config=str(analysis_config(tmp_path / "a.yaml")), inputs=[str(inputs[0])],
                              output_dir=str(tmp_path / bad)))
    message = str(refused.value)
    assert "task directory" in message and "\n" not in message.replace(repr(bad)[1:-1], "")
    assert not (tmp_path / bad).exists() or not any((tmp_path / bad).iterdir())


def test_executor_options_with_line_breaks_are_refused_before_any_job_is_recorded(tmp_path, inputs):
    task = prepare(SubmitRequest(config=str(analysis_config(tmp_path / "a.yaml")), inputs=[str(inputs[0])],
                                 output_dir=str(tmp_path / "task")))
    with pytest.raises(GridError, match="slurm option partition 'debug\\\\nrm -rf /' holds a line break"):
        executor_class("slurm")(task, {"partition": "debug\nrm -rf /"})
    with pytest.raises(GridError, match="is not an sbatch option"):
        executor_class("slurm")(task, {"extra": ["x; rm -rf /"]})
    with pytest.raises(GridError, match="condor option extra"):
        executor_class("condor")(task, {"extra": {"request_gpus": "1\nexecutable = /bin/sh"}})
    assert task.submission(0) is None


def test_text_helpers():
    assert job_name("sonic-a b\n$(x)") == "sonic-a_b_x"
    assert sbatch_value("plain-1:00", "v") == "plain-1:00"
    assert sbatch_value('/a b/"c"\\', "v") == '"/a b/\\"c\\"\\\\"'
    assert sbatch_option("--gres=gpu:1", "v") == "--gres=gpu:1"
    assert condor_arguments(["-m", "x", "/a b/it's", "$(job_index)"], "v") == "\"-m x '/a b/it''s' $(job_index)\""


@pytest.mark.slurm
def test_slurm_runs_a_task_in_a_directory_with_spaces_and_quotes(tmp_path, inputs, slurm, monkeypatch):
    """sbatch reads the quoted #SBATCH values and the shell the quoted command: the jobs run, nothing injected."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    marker = tmp_path / "pwned"
    config = hostile_config(tmp_path, marker)
    outcome = submit(SubmitRequest(config=config, output_dir=str(tmp_path / "a 'task' \"dir\""),
                                   inputs=[str(inputs[1])], executor="slurm"))
    statuses = wait(outcome.task, interval=0.3, timeout=120)
    assert [s.state for s in statuses] == ["done"], [s.reason for s in statuses]
    assert list((outcome.task.directory / "logs").glob("slurm-*_0.out"))  # --output was one path
    assert not marker.exists()
    merge(outcome.task, tmp_path / "merged.root")
    assert_same_events(tmp_path / "merged.root", single_run(config, [inputs[1]], tmp_path / "single.root"))
