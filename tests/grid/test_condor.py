"""The HTCondor executor: the submit description through the real htcondor2 bindings, the sandbox job,
a clean refusal without a pool, and the real path where an HTCondor pool can be started."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from sonic_hep.workflows.grid.errors import SubmitError
from sonic_hep.workflows.grid.executors import executor_class
from sonic_hep.workflows.grid.merge import merge
from sonic_hep.workflows.grid.status import collect, wait
from sonic_hep.workflows.grid.submit import SubmitRequest, prepare, submit
from tests.grid.conftest import single_run, wait_for
from tests.grid.samples import analysis_config, assert_same_events

htcondor2 = pytest.importorskip("htcondor2")


@pytest.fixture
def task(tmp_path, inputs):
    config = analysis_config(tmp_path / "analysis.yaml")
    config.write_text(config.read_text() + "options: {threads: 2}\n")
    return prepare(SubmitRequest(config=str(config), output_dir=str(tmp_path / "task"),
                                 inputs=[str(p) for p in inputs], executor="condor"))


def test_description_asks_for_retries_caps_limits_and_requirements(task):
    executor = executor_class("condor")(task, {"requirements": 'OpSysAndVer == "AlmaLinux9"', "request_memory": "3GB",
                                               "concurrency_limits": "sonic_link"})
    desc = executor.description(max_running=50)
    submit_object = htcondor2.Submit(desc)  # the bindings accept it as it is
    assert submit_object["universe"] == "vanilla" and submit_object["max_retries"] == "3"
    assert submit_object["max_materialize"] == "50" and submit_object["concurrency_limits"] == "sonic_link"
    assert submit_object["requirements"] == 'OpSysAndVer == "AlmaLinux9"' and submit_object["request_cpus"] == "2"
    assert submit_object["retry_until"] == "ExitCode == 2" and submit_object["should_transfer_files"] == "IF_NEEDED"
    assert submit_object["executable"] == sys.executable and str(task.directory) in submit_object["arguments"]

    text = executor.submit_file(50, task.indices)  # the same, for condor_submit by hand
    parsed = htcondor2.Submit(text)
    assert parsed.getQArgs().startswith("job_index from")
    parsed["job_index"] = "2"  # job_dir follows from each item's index
    assert parsed.expand("job_dir") == str(task.files(2).directory)
    assert list(parsed.itemdata()) == executor.itemdata(task.indices)
    assert parsed["max_retries"] == "3"


def test_transfer_mode_sends_task_files_and_inputs_and_maps_outputs_back(task, inputs):
    executor = executor_class("condor")(task, {"transfer": "true"})
    desc = executor.description(max_running=None)
    assert desc["should_transfer_files"] == "YES" and "--sandbox" in desc["arguments"]
    assert "max_materialize" not in desc
    remaps = desc["transfer_output_remaps"].strip('"').split(";")
    assert "output.root=$(job_dir)/output.root" in remaps and "state.json=$(job_dir)/state.json" in remaps
    item = executor.itemdata([1])[0]
    sent = [p.strip() for p in item["transfer_inputs"].split(",")]
    assert str(inputs[1]) in sent and str(task.directory / "config.yaml") in sent
    assert str(task.files(1).submission) in sent
    desc["job_index"] = item["job_index"]
    assert htcondor2.Submit(desc).expand("job_dir") == str(task.files(1).directory)
    parsed = htcondor2.Submit(executor.submit_file(None, [0, 1]))
    assert list(parsed.itemdata()) == executor.itemdata([0, 1])


def test_sandbox_job_runs_on_transferred_files_only(task, tmp_path, inputs):
    """What an HTCondor slot without a shared filesystem does, done by hand: transfer in, run, transfer back."""
    from sonic_hep.workflows.grid.records import Submission

    executor = executor_class("condor")(task, {"transfer": "true"})
    Submission(attempt=1, executor="condor", batch_id="7.0").save(task.files(0).submission)
    scratch = tmp_path / "slot"
    scratch.mkdir()
    for path in executor.itemdata([0])[0]["transfer_inputs"].split(", "):
        shutil.copy(path, scratch)
    run = subprocess.run([sys.executable, "-m", "sonic_hep.workflows.grid.job", ".", "0", "--sandbox"], cwd=scratch,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, (scratch / "job.log").read_text()
    report = json.loads((scratch / "state.json").read_text())
    assert report["state"] == "done" and report["events"] == 120
    assert str(scratch) in (scratch / "job.log").read_text()  # it read and wrote in the slot's directory
    for name in ("output.root", "state.json", "timing.json", "job.log"):  # transfer_output_remaps
        shutil.copy(scratch / name, task.files(0).directory / name)
    statuses, _ = collect(task)
    assert statuses[0].state == "done" and statuses[0].report.events == 120


def test_without_a_pool_submit_is_refused_and_nothing_is_left_submitted(task):
    with pytest.raises(SubmitError, match="cannot reach the HTCondor schedd"):
        submit(SubmitRequest(config=str(task.directory / "config.yaml"), output_dir=str(task.directory),
                             inputs=task.description.inputs, executor="condor"))
    assert all(task.submission(i) is None for i in task.indices)  # rolled back: still new, can be submitted later
    assert {s.state for s in collect(task)[0]} == {"new"}
    assert list((task.directory / "logs").glob("condor-submit-*.sub"))


# -- the real thing, where HTCondor is installed ---------------------------------------------------------
@pytest.fixture
def personal_condor(tmp_path, monkeypatch):
    """A personal HTCondor pool (condor_master with the Personal role) in a temporary directory."""
    master = shutil.which("condor_master")
    if not master:
        pytest.skip("HTCondor daemons are not installed (no condor_master): only the description is tested")
    local = tmp_path / "condor"
    local.mkdir()
    config = local / "condor_config"
    config.write_text(f"use ROLE: Personal\nLOCAL_DIR = {local}\nCONDOR_HOST = 127.0.0.1\n"
                      f"NETWORK_INTERFACE = 127.0.0.1\nUSE_SHARED_PORT = False\nCOLLECTOR_HOST = 127.0.0.1:0\n"
                      f"NUM_CPUS = 2\nSTARTER_ALLOW_RUNAS_OWNER = True\n")
    monkeypatch.setenv("CONDOR_CONFIG", str(config))
    htcondor2.reload_config()
    process = subprocess.Popen([master, "-f"], env=os.environ.copy(), start_new_session=True)
    try:
        def slots_ready() -> bool:
            out = subprocess.run(["condor_status", "-af", "Name"], capture_output=True, text=True)
            return out.returncode == 0 and bool(out.stdout.strip())

        wait_for(slots_ready, timeout=60, what="HTCondor slots")
        yield
    finally:
        subprocess.run(["condor_off", "-master"], capture_output=True)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        monkeypatch.undo()
        htcondor2.reload_config()


def test_real_pool_runs_and_merges(tmp_path, inputs, personal_condor):
    config = analysis_config(tmp_path / "analysis.yaml")
    outcome = submit(SubmitRequest(config=str(config), output_dir=str(tmp_path / "real"),
                                   inputs=[str(p) for p in inputs], executor="condor", max_running=2))
    assert all("." in outcome.task.submission(i).batch_id for i in outcome.submitted)
    statuses = wait(outcome.task, interval=1.0, timeout=300)
    assert [s.state for s in statuses] == ["done"] * 3
    merge(outcome.task, tmp_path / "merged.root")
    assert_same_events(tmp_path / "merged.root", single_run(config, inputs, tmp_path / "single.root"))


def test_refused_resubmission_keeps_the_failed_attempt_as_it_was(task):
    from sonic_hep.workflows.grid.records import JobReport, Submission
    from sonic_hep.workflows.grid.submit import resubmit

    Submission(attempt=1, executor="local", batch_id="local:1@elsewhere").save(task.files(0).submission)
    JobReport(attempt=1, state="failed", reason="killed by SIGKILL before reporting").save(task.files(0).report)
    with pytest.raises(SubmitError, match="cannot reach the HTCondor schedd"):
        resubmit(task, jobs=[0], executor="condor")
    status = collect(task)[0][0]
    assert status.state == "failed" and status.attempt == 1 and status.reason.startswith("killed by SIGKILL")
    assert status.submission.history == []
