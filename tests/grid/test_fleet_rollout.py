"""Rolling updates of a live fleet: the rule that decides which versions a server serves (a fake clock), the
record ``sonic fleet update`` writes and what it refuses, one real server loading and unloading versions under
load (and refusing a broken one while it keeps serving), and a whole fleet rolled while a job runs on it.

End to end everything is real: ``sonic fleet start/update/status/stop`` and ``sonic run`` in subprocesses,
``tritonserver`` processes, a second version of ``demo_mlp`` with other weights made by the test (its answers
differ from version 1's on every jet, so each event's answers show which version gave them).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import uproot
import yaml

from sonic_hep.data.demo.models import write_mlp
from sonic_hep.framework.errors import InferenceError
from sonic_hep.framework.inference.model_digest import file_digests, version_digest
from sonic_hep.framework.inference.repository import load_model
from sonic_hep.framework.inference.serving.fleet_use import FleetUse, live_uses
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.workflows.grid.errors import GridError
from sonic_hep.workflows.grid.fleet import Fleet, FleetSpec
from sonic_hep.workflows.grid.fleet_rollout import (Reconciler, RolledVersion, Rollout, read_rollouts, roll,
                                                    versions_to_serve)
from tests.conftest import PROJECT
from tests.grid.conftest import single_run
from tests.grid.test_fleet import stop_and_check_nothing_left
from tests.polling import wait_for

DEMO = PROJECT / "data" / "models" / "demo"
LABELS = ("b", "c", "uds", "g")


def content(folder: Path) -> str:
    info = load_model(folder)
    return version_digest(file_digests(info), info.version)


@pytest.fixture(scope="module")
def retrained(tmp_path_factory) -> Path:
    """``demo_mlp`` with other weights (same inputs and outputs): the new version the tests roll out."""
    return write_mlp(tmp_path_factory.mktemp("v2"), seed=7)


# -- the rule, with a fake clock -------------------------------------------------------------------------
def _rollout(*digests: str) -> Rollout:
    return Rollout("m", [RolledVersion(n, f"/m{n}", 1, d) for n, d in enumerate(digests, start=1)])


def test_a_server_keeps_an_old_version_while_a_job_uses_it_and_unloads_it_a_grace_after_the_last():
    rollout, idle = _rollout("old", "new"), {}
    assert versions_to_serve(rollout, {1}, {"old"}, idle, now=0, grace_s=10) == {1, 2}  # loads the new beside
    assert versions_to_serve(rollout, {1, 2}, {"old", "new"}, idle, now=5, grace_s=10) == {1, 2}
    assert versions_to_serve(rollout, {1, 2}, {"new"}, idle, now=20, grace_s=10) == {1, 2}  # the last user left
    assert versions_to_serve(rollout, {1, 2}, set(), idle, now=29.9, grace_s=10) == {1, 2}
    assert versions_to_serve(rollout, {1, 2}, {"old"}, idle, now=30, grace_s=10) == {1, 2}  # a user again: reset
    assert versions_to_serve(rollout, {1, 2}, set(), idle, now=31, grace_s=10) == {1, 2}
    assert versions_to_serve(rollout, {1, 2}, set(), idle, now=41, grace_s=10) == {2}
    assert versions_to_serve(rollout, {2}, set(), idle, now=50, grace_s=10) == {2}  # the current one always stays


def test_a_server_that_joins_loads_the_old_versions_jobs_still_use_and_no_other():
    rollout = _rollout("v1", "v2", "v3")
    assert versions_to_serve(rollout, {1}, {"v2"}, {}, now=0, grace_s=10) == {1, 2, 3}  # 1 only for the grace
    assert versions_to_serve(rollout, {1}, {"v2"}, {1: -20.0}, now=0, grace_s=10) == {2, 3}
    assert versions_to_serve(rollout, set(), set(), {}, now=0, grace_s=10) == {3}


# -- the record and what `sonic fleet update` refuses ----------------------------------------------------
def test_update_records_versions_in_order_and_a_roll_back_keeps_its_number(tmp_path, retrained):
    fleet = Fleet.create(tmp_path / "fleet", FleetSpec([str(DEMO)]), 0)
    rollout, version, happened = roll(fleet, "demo_mlp", retrained)
    assert (happened, version.number, [v.number for v in rollout.versions]) == ("new", 2, [1, 2])
    assert [v.digest for v in rollout.versions] == [content(DEMO / "demo_mlp"), content(retrained)]
    assert roll(fleet, "demo_mlp", retrained)[2] == "current"
    rollout, version, happened = roll(fleet, "demo_mlp", DEMO / "demo_mlp")  # back to the first files
    assert (happened, version.number, [v.number for v in rollout.versions]) == ("back", 1, [2, 1])
    assert read_rollouts(fleet.directory)["demo_mlp"].current.number == 1


@pytest.mark.parametrize("case, culprit", [
    ("none", (r"runs its servers with --model-control none: they load no new version; start the fleet with "
              r"--model-control explicit")),
    ("other model", r"does not serve 'demo_mlp' \(it serves demo_sum\)"),
    ("no folder", r"--from .*/nowhere: .*model config not found"),
    ("other name", r"--from .*/demo_points holds model 'demo_points', not 'demo_mlp'"),
    ("other inputs", r"cannot be a version of 'demo_mlp': its inputs differ from the served model's"),
    ("bad checksum", r"--from .*: model 'demo_mlp': MD5 of .*model\.onnx is .*config\.pbtxt expects"),
])
def test_update_refuses_in_one_line_what_cannot_be_a_version(tmp_path, sonic_cli, case, culprit):
    spec = {"none": {"model_control": "none"}, "other model": {"models": ["demo_sum"]}}.get(case, {})
    fleet = Fleet.create(tmp_path / "fleet", FleetSpec([str(DEMO)], **spec), 0)
    folder = {"no folder": tmp_path / "nowhere", "other name": DEMO / "demo_points",
              "other inputs": write_mlp(tmp_path / "narrow", n_in=8)}.get(case, DEMO / "demo_mlp")
    if case == "bad checksum":
        folder = shutil.copytree(DEMO / "demo_mlp", tmp_path / "changed" / "demo_mlp")
        with open(folder / "1" / "model.onnx", "ab") as model:
            model.write(b"\0")
    result = sonic_cli("fleet", "update", fleet.directory, "demo_mlp", "--from", folder, "--no-wait")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert re.search(culprit, lines[0]), lines[0]
    assert not (fleet.directory / "models").exists()  # nothing recorded


def test_update_waits_for_every_server_and_names_one_that_could_not_load_the_version():
    from types import SimpleNamespace

    from sonic_hep.framework.inference.serving import Entry
    from sonic_hep.workflows.cli.fleet_update import served
    from sonic_hep.workflows.grid.fleet import Member
    from sonic_hep.workflows.grid.fleet_rollout import wait_for_version

    since = time.time()
    loaded = Entry("0000", "a:1", models={"m": "2"}, versions={"m": {"1": "md5:1", "2": "md5:2"}})
    stale = Entry("0001", "b:1", models={"m": "1"}, versions={"m": {"1": "md5:1"}},
                  version_errors={"m": "versions [1, 2] did not load: an earlier roll-out"})
    stale.heartbeat = since + 1.0  # written before it could have read the new record (2 heartbeats)
    members = [Member(0, "running", entry=loaded), Member(1, "running", entry=stale)]
    fleet = SimpleNamespace(directory="F", spec=SimpleNamespace(heartbeat_s=1.0), members=lambda: members)
    said: list[str] = []
    with pytest.raises(GridError, match=r"servers \['0001'\] of F do not serve version 2 of 'm' yet"):
        wait_for_version(fleet, "m", 2, since, timeout=0.3, poll_s=0.1, say=said.append)
    assert said == ["0000: a:1 serves m versions 1, 2"]
    stale.heartbeat = since + 2.5  # its step read the record, and failed
    with pytest.raises(GridError, match=r"^server 0001 \(b:1\) did not load version 2 of 'm': versions \[1, 2\]"):
        wait_for_version(fleet, "m", 2, since, timeout=5, poll_s=0.1, say=said.append)
    assert served(stale) == "m (1); NOT SERVED: m: versions [1, 2] did not load: an earlier roll-out"
    members.pop()
    wait_for_version(fleet, "m", 2, since, timeout=5, poll_s=0.1, say=said.append)  # every live server has it


def test_a_job_record_lives_while_the_job_does_and_goes_with_it(tmp_path):
    fleet = Fleet.create(tmp_path / "fleet", FleetSpec([str(DEMO)], heartbeat_s=0.2, ttl_s=1.0), 0)
    use = FleetUse(fleet.directory)
    assert live_uses(fleet.directory) == []
    use.changed({"demo_mlp": "md5:aa"})
    [record] = live_uses(fleet.directory)
    assert record.models == {"demo_mlp": "md5:aa"} and record.ttl_s == 1.0
    first = record.heartbeat
    wait_for(lambda: live_uses(fleet.directory)[0].heartbeat > first, 10, "a heartbeat")
    assert live_uses(fleet.directory, now=time.time() + 5) == []  # a record not renewed for a TTL is ignored
    use.close()
    assert live_uses(fleet.directory) == [] and list((fleet.directory / "users").iterdir()) == []
    (fleet.directory / "users" / "bad.json").write_text("{not json")
    assert live_uses(fleet.directory) == []  # a bad file counts as no use


# -- one real server ------------------------------------------------------------------------------------
@pytest.mark.triton
@pytest.mark.timeout(180)
def test_a_server_loads_and_unloads_versions_under_load_without_a_failed_request(tmp_path, retrained):
    """Thousands of requests pinned to version 1 while version 2 is loaded beside it, then to version 2 while
    version 1 is unloaded: none fails. A version that does not load leaves the server serving what it served,
    the reason is one line, and the server still counts as ready (Triton's own readiness does not)."""
    fleet = Fleet.create(tmp_path / "fleet", FleetSpec([str(DEMO)]), 0)
    shift = [0.0]  # the reconciler's clock runs ahead of the job records' by this much (their TTL is 20 s)
    with TritonServer([DEMO], models=["demo_mlp"], model_control="explicit", workdir=tmp_path / "server") as server:
        versions = Reconciler(fleet.directory, server, grace_s=10.0, clock=lambda: time.time() + shift[0])
        assert versions.versions() == {"demo_mlp": {"1": content(DEMO / "demo_mlp")}} and not versions.step()
        x = np.random.default_rng(3).normal(size=(8, 16)).astype(np.float32)
        answers: dict[str, list] = {"1": [], "2": []}
        failures: list[str] = []
        stop = threading.Event()

        def ask(version: str) -> None:
            client = grpcclient.InferenceServerClient(server.grpc_url)
            while not stop.is_set():
                tensor = grpcclient.InferInput("x", list(x.shape), "FP32")
                tensor.set_data_from_numpy(x)
                try:
                    answers[version].append(client.infer("demo_mlp", [tensor], model_version=version).as_numpy("probs"))
                except Exception as err:  # noqa: BLE001 - counted: the test asserts there is none
                    failures.append(str(err))
            client.close()

        def under_load(version: str, change) -> int:
            stop.clear()
            before = len(answers[version])
            threads = [threading.Thread(target=ask, args=(version,)) for _ in range(3)]
            for thread in threads:
                thread.start()
            wait_for(lambda: len(answers[version]) > before + 50, 30, "requests before the change")
            change()
            during = len(answers[version])
            wait_for(lambda: len(answers[version]) > during + 50, 30, "requests after the change")
            stop.set()
            for thread in threads:
                thread.join()
            return len(answers[version]) - before

        use = FleetUse(fleet.directory)
        use.changed({"demo_mlp": content(DEMO / "demo_mlp")})  # a job on version 1
        roll(fleet, "demo_mlp", retrained)
        assert under_load("1", lambda: versions.step()) > 100
        assert versions.versions()["demo_mlp"].keys() == {"1", "2"} and versions.ready()
        shift[0] = 15.0  # past the grace: version 1 stays while the job runs
        assert not versions.step() and versions.versions()["demo_mlp"].keys() == {"1", "2"}
        use.close()  # the job ended: version 1 goes a grace later
        assert not versions.step()
        shift[0] = 26.0
        assert under_load("2", lambda: versions.step()) > 100
        assert failures == [] and versions.versions()["demo_mlp"].keys() == {"2"}
        assert all(np.allclose(a, answers["1"][0]) for a in answers["1"])  # one version's answers each ...
        assert all(np.allclose(a, answers["2"][0]) for a in answers["2"])
        assert not np.allclose(answers["1"][0], answers["2"][0])  # ... and the two versions' differ

        broken = shutil.copytree(retrained, tmp_path / "broken" / "demo_mlp")
        (broken / "config.pbtxt").write_text((broken / "config.pbtxt").read_text().split("model_repository_agents")[0])
        (broken / "1" / "model.onnx").write_bytes(b"not a model")
        roll(fleet, "demo_mlp", broken)
        assert under_load("2", lambda: versions.step()) > 50 and failures == []
        error = versions.errors["demo_mlp"]
        assert "versions [2, 3] did not load" in error and "model.onnx" in error and "\n" not in error
        assert versions.versions()["demo_mlp"].keys() == {"2"} and versions.ready() and not server.ready()
        shift[0] = 100.0
        assert not versions.step()  # the same failed set is not tried again at every heartbeat
        with pytest.raises(InferenceError, match="changed since it was rolled out"):
            shutil.copy(DEMO / "demo_mlp" / "1" / "model.onnx", broken / "1" / "model.onnx")
            read_rollouts(fleet.directory)["demo_mlp"].current.source().served_sums()


# -- a whole fleet ---------------------------------------------------------------------------------------
def gated_config(path: Path, gate: Path, events: int, held_from: int) -> Path:
    """demo_inference paced (one request per event) with events from ``held_from`` on held until ``gate`` exists:
    the job runs, and is still running, for as long as the test needs."""
    config = {
        "process": "rollout",
        "source": {"type": "empty", "events": events},
        "modules": {"toyJets": {"type": "ToyJets"}, "pace": {"type": "SleepExternal", "ms": 10.0},
                    "gate": {"type": "WaitForFile", "path": str(gate), "from_event": held_from, "timeout_s": 200},
                    "tagger": {"type": "ToyTagger"},
                    "hist": {"type": "Histogram1D", "src": "pace:value", "name": "pace", "high": 1.0e6},
                    "gatehist": {"type": "Histogram1D", "src": "gate:value", "name": "gate", "high": 1.0e6}},
        "path": ["toyJets", "pace", "gate", "tagger", "hist", "gatehist"],
        "output": {"file": "rollout.root", "products": ["tagger:scores as ToyJet"]},
        "services": {"inference": {"mode": "direct", "repository": [str(DEMO)], "fallback": False, "timeout_s": 20}},
        "options": {"streams": 2, "threads": 1, "events_per_call": 1},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def requests_to(fleet_dir: Path, version: str) -> int:
    """Requests the fleet's live servers answered with ``version`` of ``demo_mlp`` (Triton's statistics)."""
    total = 0
    for member in Fleet(fleet_dir).members():
        if member.entry is not None:
            client = grpcclient.InferenceServerClient(member.entry.address)
            try:
                stats = client.get_inference_statistics("demo_mlp", version).model_stats
                total += sum(s.inference_stats.success.count for s in stats)
            finally:
                client.close()
    return total


def scores(path: Path) -> dict[str, np.ndarray]:
    with uproot.open(path) as handle:
        events = handle["Events"]
        return {label: events[f"ToyJet_{label}"].array() for label in LABELS}


def from_version(job: dict, reference: dict) -> np.ndarray:
    """Per event: whether every jet's scores equal those of ``reference`` (a direct run of one version)."""
    same = [ak.all(np.isclose(job[label], reference[label], rtol=1e-5, atol=1e-6), axis=1) for label in LABELS]
    return np.asarray(same[0] & same[1] & same[2] & same[3])


@pytest.mark.slow
@pytest.mark.triton
@pytest.mark.timeout(300)
def test_a_model_rolled_across_a_live_fleet_fails_no_request_and_no_job_mixes_versions(tmp_path, sonic_cli,
                                                                                        retrained):
    """Two CPU servers; job 1 (its repository holds version 1) starts, then version 2 is rolled out while it sends
    requests (it is seen sending more after the roll), and it is held at a gate until job 2 (its repository holds
    version 2) and job 3 (no local copy) have run. Every event of job 1 is answered by version 1, every event of
    jobs 2 and 3 by version 2, no request fails; version 1 stays on both servers while job 1 runs and is unloaded
    from both once it has ended."""
    fleet_dir, gate, events, held_from = tmp_path / "fleet", tmp_path / "gate", 2000, 1900  # 10 s before the gate
    config = gated_config(tmp_path / "rollout.yaml", gate, events, held_from)
    v1, v2 = content(DEMO / "demo_mlp"), content(retrained)
    reference = {}
    for name, repository in (("v1", DEMO), ("v2", retrained.parent)):  # direct runs of each version, same events
        out = single_run(config, [], tmp_path / f"{name}.root",
                         ("gate.from_event=1000000", "pace.ms=0", f"services.inference.repository=[{repository}]"))
        reference[name] = scores(out)
    with_jets = np.asarray(ak.num(reference["v1"]["b"]) > 0)
    assert with_jets.sum() > 200 and not from_version(reference["v1"], reference["v2"])[with_jets].any()  # told apart

    sonic_cli("fleet", "start", fleet_dir, "-r", DEMO, "-m", "demo_mlp", "--servers", "2", "--cpus-per-server", "1",
              "--host", "127.0.0.1", "--heartbeat-s", "1", "--ttl-s", "4", "--drain-s", "1", "--timeout", "150",
              "--wait", check=True)
    run = [sys.executable, "-m", "sonic_hep.workflows.cli", "run", str(config), "--fleet", str(fleet_dir),
           "--no-progress", "-q"]
    job1 = None
    try:
        job1 = subprocess.Popen([*run, "-o", str(tmp_path / "job1.root"), "--timing-json", str(tmp_path / "job1.json")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        [use] = wait_for(lambda: live_uses(fleet_dir), 60, "job 1 to record the version it took")
        assert use.models == {"demo_mlp": v1}
        rolled = sonic_cli("fleet", "update", fleet_dir, "demo_mlp", "--from", retrained, "--timeout", "60", check=True)
        after_roll = requests_to(fleet_dir, "1")
        wait_for(lambda: requests_to(fleet_dir, "1") > after_roll + 20, 30,  # it had not reached its gate
                 "job 1 to go on sending requests to version 1 after the roll")
        assert "demo_mlp version 2" in rolled.stderr and rolled.stdout.count("serves demo_mlp versions 1, 2") == 2
        assert job1.poll() is None, job1.communicate()  # it runs through the roll
        status = json.loads(sonic_cli("fleet", "status", fleet_dir, "--json", check=True).stdout)
        assert [m["versions"] for m in status["members"]] == [{"demo_mlp": {"1": v1, "2": v2}}] * 2
        current = [(v["version"], v["current"], v["jobs"]) for v in status["rollouts"][0]["versions"]]
        assert current == [(1, False, 1), (2, True, 0)]
        shown = sonic_cli("fleet", "status", fleet_dir, check=True).stdout
        assert shown.count("demo_mlp (1, 2)") == 2 and "model demo_mlp version 2 (current)" in shown

        later = {}
        for job, repository in (("job2", str(retrained.parent)), ("job3", "")):  # new jobs: version 2's copy, none
            sonic_cli(*run[3:], "-o", tmp_path / f"{job}.root", "--timing-json", tmp_path / f"{job}.json",
                      "-n", "500", "-p", "pace.ms=0", "-p", f"gate.from_event={events}",
                      "-p", f"services.inference.repository=[{repository}]",
                      check=True)
            later[job] = json.loads((tmp_path / f"{job}.json").read_text())
        assert all(m.entry.versions == {"demo_mlp": {"1": v1, "2": v2}} for m in Fleet(fleet_dir).members())
        gate.write_text("go")  # job 1 sends the rest of its requests after the roll
        out, err = job1.communicate(timeout=120)
        assert job1.returncode == 0, err
        wait_for(lambda: all(m.entry is not None and m.entry.versions == {"demo_mlp": {"2": v2}}
                             for m in Fleet(fleet_dir).members()), 60, "version 1 unloaded from both servers")
    finally:
        if job1 is not None and job1.poll() is None:
            job1.kill()
        stop_and_check_nothing_left(sonic_cli, fleet_dir)

    first = json.loads((tmp_path / "job1.json").read_text())
    for name, timing, version in (("job1", first, "v1"), ("job2", later["job2"], "v2"), ("job3", later["job3"], "v2")):
        counts = timing["inference"]["models"]["demo_mlp"]
        assert counts["failures"] == counts["failovers"] == counts["retries"] == 0, (name, counts)
        job = scores(tmp_path / f"{name}.root")
        expected = {label: values[:len(job[label])] for label, values in reference[version].items()}
        assert len(job["b"]) in (events, 500) and from_version(job, expected).all(), name  # every event: one version
    assert len(first["inference"]["models"]["demo_mlp"]["servers"]) == 2  # job 1 used both servers
    with uproot.open(tmp_path / "job1.root") as handle:
        provenance = json.loads(str(handle["sonic_metadata"]))["provenance"]["inference"]["demo_mlp"]
    assert provenance["digest"] == f"{file_digest(DEMO)}" and provenance["mode"] == "sonic"


def file_digest(repository: Path) -> str:
    from sonic_hep.framework.inference.model_digest import model_digest
    from sonic_hep.framework.inference.repository import ModelRepository

    return model_digest(ModelRepository([repository]), "demo_mlp")
