"""One version of a model per job: on servers that serve several versions side by side (a fleet rolling one in),
the client pins, on each server, the version whose files are the job's own copy's (or, without a copy, the version
the job took first), whatever number each server gives it; a server without it is passed over. Fakes stand in
for the servers (a fleet rolled for real: ``tests/grid/test_fleet_rollout.py``)."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import pytest

from sonic_hep.data.demo.models import write_mlp
from sonic_hep.framework.inference.fake import FakeServer
from sonic_hep.framework.inference.model_digest import digest, file_digests, model_digest, version_digest
from sonic_hep.framework.inference.repository import CHECKSUM_PARAMETER, ModelInfo, ModelRepository, load_model
from sonic_hep.framework.inference.sonic.client import SonicClient
from sonic_hep.framework.inference.sonic.servers import ServerPool, ServerState
from sonic_hep.framework.inference.sonic.version_pins import VersionPins
from sonic_hep.framework.inference.triton_errors import NoServerError

X = np.ones((2, 16), np.float32)


@pytest.fixture
def models(tmp_path):
    """Two trainings of ``demo_mlp``: the old one (the job's copy) and the new one."""
    return load_model(write_mlp(tmp_path / "old", seed=1)), load_model(write_mlp(tmp_path / "new", seed=7))


class Versioned(FakeServer):
    """A server serving ``demo_mlp`` in several versions: ``{number: files}``; each answers its own constant (the
    index of its files in ``files``), so an answer shows which files gave it."""

    def __init__(self, address: str, versions: dict[str, ModelInfo], files: list[ModelInfo]):
        config = files[0].config.__class__()
        config.CopyFrom(files[0].config)
        config.ClearField("model_repository_agents")
        for number, info in versions.items():
            for rel, value in file_digests(info).items():
                config.parameters[f"{CHECKSUM_PARAMETER}MD5:{number}/{rel.partition('/')[2]}"].string_value = value
        served = ModelInfo("demo_mlp", None, config, 0, files[0].inputs, files[0].outputs)
        super().__init__(address, {"demo_mlp": (served, None)})
        self.versions = {number: float(files.index(info)) for number, info in versions.items()}
        self.asked: list[str] = []

    def ready_versions(self, model: str) -> list[str]:
        return list(self.versions)

    def send(self, info, inputs, outputs) -> Future:
        version = self.model_versions.get(info.name, "")  # "" would be the server's choice: never sent here
        self.asked.append(version)
        future: Future = Future()
        future.set_result({name: np.full((len(X), 4), self.versions[version], np.float32) for name in outputs})
        return future


def pool_of(servers: list[FakeServer], repository: ModelRepository | None) -> ServerPool:
    pool = ServerPool([], repository=repository, fallback=False, refresh_s=1e9)
    pool.states = [ServerState(s, models={"demo_mlp": "1"}) for s in servers]
    return pool


class Told:
    """A listener: what it was told, and whether any server was pinned when it was told."""

    def __init__(self, servers: list[FakeServer]):
        self.servers, self.heard, self.pinned_before, self.closed = servers, [], [], False

    def changed(self, used):
        self.heard.append(dict(used))
        self.pinned_before.append(any(s.model_versions for s in self.servers))

    def close(self):
        self.closed = True


def test_a_job_with_a_local_copy_takes_that_version_on_every_server_whatever_its_number(models, tmp_path):
    old, new = models
    a = Versioned("a:1", {"1": old, "2": new}, [old, new])
    b = Versioned("b:1", {"7": old}, [old, new])  # the same files under another number
    c = Versioned("c:1", {"1": new}, [old, new])  # only the new files
    repository = ModelRepository([tmp_path / "old"])
    told = Told([a, b, c])
    client = SonicClient(pool_of([a, b, c], repository))
    client.pool.pins.watch(told)
    answers = [client.infer("demo_mlp", {"x": X}).result(timeout=10)["probs"] for _ in range(12)]
    client.close()
    assert all((answer == 0).all() for answer in answers)  # every answer from the old files
    assert (a.model_versions, b.model_versions, c.model_versions) == ({"demo_mlp": "1"}, {"demo_mlp": "7"}, {})
    assert set(a.asked) == {"1"} and set(b.asked) == {"7"} and c.asked == []
    assert "c:1" in client.pool.states[2].refused["demo_mlp"] and version_digest(
        file_digests(new), 1) != version_digest(file_digests(old), 1)
    assert told.heard == [{"demo_mlp": version_digest(file_digests(old), 1)}] and told.pinned_before == [False]
    assert told.closed  # the job ended: the listener heard it
    assert client.pool.digest_on("b:1", "demo_mlp") == model_digest(repository, "demo_mlp")  # what outputs record
    assert client.pool.digest_on("c:1", "demo_mlp") is None


def test_a_job_without_a_copy_keeps_the_version_it_took_first(models):
    old, new = models
    a = Versioned("a:1", {"1": old, "2": new}, [old, new])
    b = Versioned("b:1", {"1": old}, [old, new])  # has not loaded the new version yet
    c = Versioned("c:1", {"3": new}, [old, new])
    pins = VersionPins(None)
    assert pins.check(a.models["demo_mlp"][0], a) == ""  # the first server: its newest version
    assert a.model_versions == {"demo_mlp": "2"}
    refusal = pins.check(b.models["demo_mlp"][0], b)
    assert "serves no version with the files of the version this job took first" in refusal
    assert "b:1" in refusal and "\n" not in refusal and b.model_versions == {}
    assert pins.check(c.models["demo_mlp"][0], c) == "" and c.model_versions == {"demo_mlp": "3"}
    assert pins.digest_on("a:1", "demo_mlp") == digest({"2/model.onnx": file_digests(new)["1/model.onnx"]})

    first_old = VersionPins(None)  # a job whose first server had only the old version keeps it
    assert first_old.check(b.models["demo_mlp"][0], b) == "" and b.model_versions == {"demo_mlp": "1"}
    a.model_versions.clear()
    assert first_old.check(a.models["demo_mlp"][0], a) == "" and a.model_versions == {"demo_mlp": "1"}


def test_a_version_pinned_in_the_configuration_is_the_only_one_considered(models, tmp_path):
    old, new = models
    server = Versioned("a:1", {"1": old, "2": new}, [old, new])
    server.model_versions["demo_mlp"] = "2"
    pool = pool_of([server], ModelRepository([tmp_path / "old"]))
    with pytest.raises(NoServerError, match=r"a:1 serves no version with the files of the local .*versions: 2 md5:"):
        pool.choose("demo_mlp")


def test_a_server_serving_one_version_is_refused_as_before_naming_both_digests(models, tmp_path):
    old, new = models
    server = Versioned("a:1", {"1": new}, [old, new])
    pool = pool_of([server], ModelRepository([tmp_path / "old"]))
    with pytest.raises(NoServerError) as refused:
        pool.choose("demo_mlp")
    message = str(refused.value)
    assert f"is not the local {tmp_path / 'old' / 'demo_mlp'}" in message
    assert digest(file_digests(old)) in message and digest(file_digests(new)) in message
