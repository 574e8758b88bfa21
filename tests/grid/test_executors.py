"""Executor options are checked like module parameters; Slurm array syntax and scripts."""

from __future__ import annotations

import pytest

from sonic_hep.workflows.grid.errors import GridError
from sonic_hep.workflows.grid.executors import executor_class, names, parse_key_values
from sonic_hep.workflows.grid.executors.slurm import compress
from sonic_hep.workflows.grid.submit import SubmitRequest, prepare
from tests.grid.samples import analysis_config


@pytest.fixture
def task(tmp_path, inputs):
    return prepare(SubmitRequest(config=str(analysis_config(tmp_path / "a.yaml")), output_dir=str(tmp_path / "task"),
                                 inputs=[str(p) for p in inputs]))


def test_options_are_validated_and_typed(task):
    slurm = executor_class("slurm")
    options = parse_key_values(["partition=short", "extra=[--gres=gpu:1, --exclusive]", "cpus_per_task=4"])
    parsed = slurm(task, options).options
    assert parsed.partition == "short" and parsed.extra == ["--gres=gpu:1", "--exclusive"] and parsed.cpus_per_task == 4
    with pytest.raises(GridError, match="no option 'partiton' .*did you mean 'partition'"):
        slurm(task, {"partiton": "short"})
    with pytest.raises(GridError, match="option 'cpus_per_task'"):
        slurm(task, {"cpus_per_task": "many"})
    with pytest.raises(GridError, match="must look like key=value"):
        parse_key_values(["partition"])
    with pytest.raises(GridError, match="unknown executor 'slrum'.*did you mean 'slurm'"):
        executor_class("slrum")
    assert names() == ["condor", "dask", "local", "slurm"]


def test_slurm_arrays_and_scripts(task):
    assert compress([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8" and compress([3]) == "3"
    executor = executor_class("slurm")(task, {"time": "01:00:00", "extra": ["--gres=gpu:1"]})
    script = executor.script([1000, 1001, 1003], offset=1000, max_running=5)
    assert "#SBATCH --array=0-1,3%5" in script and "#SBATCH --gres=gpu:1" in script
    assert "#SBATCH --time=01:00:00" in script and "#SBATCH --cpus-per-task=1" in script
    assert script.rstrip().endswith(f'{task.directory} "$SLURM_ARRAY_TASK_ID" --offset 1000')


def test_the_places_to_run_are_the_tasks_whichever_driver_takes_them(task):
    from sonic_hep.workflows.grid.executors.driver import Slots

    first, second = Slots(task, 2), Slots(task, 2)  # two drivers: a submission and a resubmission
    assert [first.take(), first.take(), first.take()] == [0, 1, None]
    assert second.take() is None  # both places held by the first driver's jobs
    first.give(1)
    assert second.take() == 1 and first.take() is None
    wider = Slots(task, 3)  # a resubmission with --max-running 3: one place more, not three
    assert [wider.take(), wider.take()] == [2, None]


def test_places_that_cannot_be_shared_still_cap_the_driver(task, capsys):
    from sonic_hep.workflows.grid.executors.driver import Slots

    (task.directory / "logs").mkdir(exist_ok=True)
    (task.directory / "logs" / "slots").write_text("a file where the lock folder goes")
    slots = Slots(task, 2)
    assert [slots.take(), slots.take(), slots.take()] == [0, 1, None]
    slots.give(0)
    assert slots.take() == 0
    assert "--max-running counts only this submission's jobs" in capsys.readouterr().out
