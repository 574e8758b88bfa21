"""Which cards a server uses, without a GPU: the cards a process may see (CUDA_VISIBLE_DEVICES, Slurm's), the
server's own CUDA_VISIBLE_DEVICES and instance groups as the generated command and runtime repository hold
them, a local fleet's one card per server, and what status shows."""

from __future__ import annotations

import logging
import subprocess

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from sonic_hep.framework.errors import InferenceError
from sonic_hep.framework.inference.repository import ModelRepository, parse_config
from sonic_hep.framework.inference.serving import gpu_placement, runtime_repository
from sonic_hep.framework.inference.serving import server as server_module
from sonic_hep.framework.inference.serving.fleet_directory import EntryProblem, entry_from
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.framework.inference.serving.server_options import ServerOptions
from sonic_hep.framework.paths import MODELS
from sonic_hep.workflows.grid.fleet import FleetSpec
from sonic_hep.workflows.grid.fleet_member import member_options

PROTODUNE_GPU = MODELS / "protodune_gpu"


@pytest.mark.parametrize("environ, visible", [
    ({}, None),  # nothing narrows them: every card of the machine
    ({"CUDA_VISIBLE_DEVICES": "4,5"}, ["4", "5"]),  # Slurm's --gres, or the operator's
    ({"CUDA_VISIBLE_DEVICES": ""}, []),  # set and empty: no card at all
    ({"SLURM_JOB_GPUS": "2,7"}, ["2", "7"]),  # a site that does not export the CUDA variable
    ({"SLURM_JOB_GPUS": "2,7", "CUDA_VISIBLE_DEVICES": "0,1"}, ["0", "1"]),  # the CUDA variable wins
])
def test_the_cards_a_process_may_use(environ, visible):
    assert gpu_placement.visible_cards(environ) == visible


def test_gpus_are_positions_among_the_cards_the_batch_system_gave():
    assert gpu_placement.cards_for([1], {"CUDA_VISIBLE_DEVICES": "4,5"}) == ["5"]
    assert gpu_placement.cards_for([0, 1], {"SLURM_STEP_GPUS": "6,3"}) == ["6", "3"]
    with pytest.raises(InferenceError) as err:  # never escapes the assignment
        gpu_placement.cards_for([2], {"CUDA_VISIBLE_DEVICES": "4,5"})
    assert str(err.value) == ("server gpus [2]: GPU [2] not among the 2 this process may use "
                              "(CUDA_VISIBLE_DEVICES=4,5); give positions 0-1")


@pytest.mark.parametrize("servers, expected, shared", [
    (4, [["0"], ["1"], ["2"], ["3"]], False),  # one server per card
    (2, [["0", "1"], ["2", "3"]], False),  # two cards each
    (1, [["0", "1", "2", "3"]], False),
    (6, [["0"], ["1"], ["2"], ["3"], ["0"], ["1"]], True),  # more servers than cards: shared, and said
])
def test_servers_of_one_node_take_their_own_slices(servers, expected, shared):
    positions, note = gpu_placement.node_shares(servers, ["0", "1", "2", "3"])
    assert [[str(p) for p in share] for share in positions] == expected
    assert bool(note) == shared


def test_a_gpu_group_runs_its_count_on_each_of_the_servers_cards_and_only_those(caplog):
    info = ModelRepository([PROTODUNE_GPU]).get("emtrkmichelid")
    placed = runtime_repository.runtime_config(info, "gpu", gpus=2).instance_group[0]
    assert (placed.kind, placed.count, list(placed.gpus)) == (mc.ModelInstanceGroup.KIND_GPU, 16, [0, 1])
    # a config written for a bigger node (cards 2 and 3) on a one-card server: placed on its card, with a notice
    info.config.instance_group[0].gpus.extend([2, 3])
    with caplog.at_level(logging.WARNING):
        moved = runtime_repository.runtime_config(info, "gpu", gpus=1).instance_group[0]
    assert list(moved.gpus) == [0] and moved.count == 16
    assert "instance group on GPUs [2, 3], but this server has 1 card(s): placed on [0]" in caplog.text
    assert list(runtime_repository.runtime_config(info, "cpu", cores=2).instance_group[0].gpus) == []


@pytest.fixture
def spawned(monkeypatch, tmp_path):
    """Starts nothing: what ``TritonServer._spawn`` would run, with which environment."""
    seen: dict = {}

    def fake_spawn(command, **kwargs):
        seen.update(command=command, env=kwargs["env"])
        return subprocess.Popen(["true"])

    monkeypatch.setattr(server_module, "spawn", fake_spawn)

    def spawn_for(**options) -> tuple[TritonServer, dict]:
        server = TritonServer([PROTODUNE_GPU], workdir=tmp_path / "server", **options)
        server.workdir.mkdir(parents=True, exist_ok=True)
        (server.workdir / "backends").mkdir(exist_ok=True)
        server.served = [info.name for info in server._prepare_repository(server.workdir / "repository")]
        server.gpu_instances = gpu_placement.gpu_instances(server.workdir / "repository", server.served,
                                                           server.gpu_cards)
        server.ports = {"grpc": 1, "http": 2, "metrics": 3}
        server._spawn(server.workdir / "repository", server.workdir / "backends")
        server.process.wait()
        server._close_log()
        return server, seen

    return spawn_for


def test_a_server_on_one_card_of_a_slurm_job_sees_that_card_alone(spawned, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")  # what Slurm gave the job
    server, seen = spawned(device="gpu", gpus=[1])
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == "5"
    group = parse_config(server.workdir / "repository" / "emtrkmichelid" / "config.pbtxt").instance_group[0]
    assert list(group.gpus) == [0] and group.count == 16  # the server's own numbering: its one card
    described = server.describe()
    assert described["gpus"] == ["5"] and described["gpu_instances"] == {"emtrkmichelid": {"5": 16}}
    assert gpu_placement.placement_lines(described) == [
        "  GPUs: 5 (CUDA_VISIBLE_DEVICES of the server)", "    emtrkmichelid: card 5: 16"]


def test_without_a_choice_a_gpu_server_keeps_the_batch_systems_cards_and_a_cpu_server_hides_them(spawned,
                                                                                                monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("SLURM_JOB_GPUS", "3,6")
    server, seen = spawned(device="gpu")
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == "3,6"
    assert server.gpu_instances == {"emtrkmichelid": {"3": 16, "6": 16}}  # the count on each card, not split
    server, seen = spawned(device="cpu")
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == "" and server.gpu_cards is None


def test_gpus_are_refused_on_a_cpu_server_and_past_the_cards_there_are(monkeypatch):
    with pytest.raises(ValueError, match=r"^gpus: \[0\] needs device gpu"):
        ServerOptions.from_dict({"gpus": "0"}, error=lambda p: ValueError(f"{p.key}: {p.message}"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(InferenceError, match=r"^server gpus \[1\]: GPU \[1\] not among the 1"):
        TritonServer([PROTODUNE_GPU], device="gpu", gpus="1")


def test_a_local_fleet_gives_each_server_job_its_own_card(caplog):
    spec = FleetSpec([str(PROTODUNE_GPU)], device="gpu", gpus_per_server=1)
    node = {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert [member_options(spec, k, node).gpus for k in range(4)] == [[0], [1], [2], [3]]
    with caplog.at_level(logging.WARNING):
        assert member_options(spec, 5, node).gpus == [1]
    assert "cards are shared" in caplog.text
    slurm = FleetSpec([str(PROTODUNE_GPU)], device="gpu", gpus_per_server=1, executor="slurm")
    assert member_options(slurm, 3, node).gpus is None  # the batch system gave the job its card


def test_a_fleet_entry_names_its_servers_cards():
    entry = entry_from({"name": "0001", "address": "n1:8001", "host": "n1", "pid": 7, "heartbeat": 1.0,
                        "ttl_s": 20.0, "gpus": ["2"]})
    assert entry.gpus == ["2"]
    with pytest.raises(EntryProblem, match="field 'gpus' must list card names as strings"):
        entry_from({"name": "0001", "address": "n1:8001", "host": "n1", "pid": 7, "heartbeat": 1.0, "ttl_s": 20.0,
                    "gpus": [2]})
