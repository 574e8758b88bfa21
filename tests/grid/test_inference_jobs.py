"""Jobs with inference: ``--inference sonic --server`` passes through to every job and gives the same
output as a direct single-process run; ``sonic plan`` reads the jobs' measurements."""

from __future__ import annotations

import json

import awkward as ak
import numpy as np
import pytest
import uproot

from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.workflows.grid.merge import merge
from sonic_hep.workflows.grid.task import Task
from tests.conftest import PROJECT
from tests.grid.conftest import single_run, submit_and_wait

pytestmark = pytest.mark.triton

REPOSITORY = PROJECT / "data" / "models" / "demo"
SMALL = ("source.events=90", "options.streams=2", "options.threads=1")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with TritonServer([REPOSITORY], models=["demo_mlp"], workdir=tmp_path_factory.mktemp("grid-triton")) as running:
        yield running


def test_sonic_jobs_on_a_given_server_equal_a_direct_single_run(tmp_path, server, sonic_cli):
    statuses = submit_and_wait("demo_inference", tmp_path / "task", overrides=list(SMALL), events_per_job=30,
                               max_running=2, inference="sonic", servers=[server.grpc_url])
    assert [s.state for s in statuses] == ["done"] * 3
    task = Task(tmp_path / "task")
    assert f"--inference sonic --server {server.grpc_url}" in task.files(0).command.read_text()
    for index in task.indices:
        inference = json.loads(task.files(index).timing.read_text())["inference"]
        assert inference["mode"] == "sonic" and list(inference["models"]["demo_mlp"]["servers"]) == [server.grpc_url]
    merge(task, tmp_path / "merged.root")

    direct = single_run(PROJECT / "configs" / "demo_inference.yaml", [], tmp_path / "direct.root", SMALL)
    with uproot.open(tmp_path / "merged.root") as m, uproot.open(direct) as d:
        assert m["Events"].num_entries == d["Events"].num_entries == 90
        assert ak.all(m["Events"]["nToyJet"].array() == d["Events"]["nToyJet"].array())  # same random jets
        for label in ("b", "c", "uds", "g"):
            np.testing.assert_allclose(ak.flatten(m["Events"][f"ToyJet_{label}"].array()),
                                       ak.flatten(d["Events"][f"ToyJet_{label}"].array()), rtol=1e-5)

    plan = sonic_cli("plan", task.directory, "--repository", REPOSITORY, "--link-gbps", "10",
                     "--json", tmp_path / "plan.json", check=True)
    numbers = json.loads((tmp_path / "plan.json").read_text())
    rows = sum(int(n) for n in uproot.open(direct)["Events"]["nToyJet"].array(library="np"))
    assert numbers["server_s_per_event"] > 0 and "Triton compute" in numbers["sources"]["t_server"]
    # what the requests carry: x (16 floats) in, and only the output the tagger asks for (probs, 4) back
    assert numbers["bytes_per_event"] == pytest.approx(rows / 90 * (16 + 4) * 4)
    assert numbers["jobs_per_server"] == pytest.approx(numbers["other_s_per_event"] / numbers["server_s_per_event"])
    assert "jobs per server" in plan.stdout and "job cap for the link" in plan.stdout
