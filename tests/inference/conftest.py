"""Real Triton servers for the inference tests: one per session for the demo models (and the CMS
ParticleNet AK4 model when ../shared exists), plus helpers to build small test repositories."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.data.demo.models import write_mlp
from sonic_hep.framework.inference.server_spec import ServerSpec
from sonic_hep.framework.inference.repository import ModelRepository
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.framework.inference.sonic.servers import ServerPool
from sonic_hep.framework.inference.sonic.client import SonicClient

from tests.conftest import shared_path

CMS_MODEL = "particlenet_AK4"


@pytest.fixture(scope="session")
def demo_repository() -> ModelRepository:
    return ModelRepository([DEMO_REPOSITORY])


@pytest.fixture(scope="session")
def demo_server(tmp_path_factory):
    """One Triton server on the committed demo repository, shared by the tests that only read."""
    with TritonServer([DEMO_REPOSITORY], workdir=tmp_path_factory.mktemp("demo-server")) as server:
        yield server


@pytest.fixture(scope="session")
def cms_repository() -> Path:
    return shared_path("real", "cms-models")


@pytest.fixture(scope="session")
def cms_server(cms_repository, tmp_path_factory):
    """The CMS repository served unmodified (ParticleNet AK4 only, to keep start-up short)."""
    with TritonServer([cms_repository], models=[CMS_MODEL], workdir=tmp_path_factory.mktemp("cms-server")) as server:
        yield server


def sonic_client(servers: list, repository: ModelRepository | None = None, fallback: bool = False,
                 allowed_tries: int = 3, **connection) -> SonicClient:
    """A SonicClient on explicit servers (no fallback unless asked)."""
    shared_memory = connection.pop("shared_memory", "auto")
    probe_timeout = connection.pop("probe_timeout", 5.0)
    pool = ServerPool([ServerSpec.parse(s) for s in servers], repository=repository, fallback=fallback,
                      connection_options=connection, shared_memory=shared_memory, refresh_s=0.2,
                      probe_timeout=probe_timeout)
    return SonicClient(pool, allowed_tries=allowed_tries)


SLOW_MODEL = '''
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Returns its input after sleeping ``delay_ms`` (the first input value) milliseconds."""

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "delay_ms").as_numpy()
            time.sleep(float(x.max()) / 1000)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("echo", x.astype(np.float32))]))
        return responses
'''


def write_slow_model(repository: Path, name: str = "slow") -> Path:
    """A python-backend model that sleeps as long as its input says (timeouts, retries, python models)."""
    model_dir = repository / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "1" / "model.py").write_text(textwrap.dedent(SLOW_MODEL))
    (model_dir / "config.pbtxt").write_text(textwrap.dedent(f'''
        name: "{name}"
        backend: "python"
        max_batch_size: 8
        input [{{ name: "delay_ms", data_type: TYPE_FP32, dims: [1] }}]
        output [{{ name: "echo", data_type: TYPE_FP32, dims: [1] }}]
        instance_group [{{ kind: KIND_CPU, count: 1 }}]
        '''))
    return model_dir


@pytest.fixture(scope="session")
def other_repository(tmp_path_factory) -> Path:
    """A repository unlike the demo one: a ``demo_mlp`` with other weights, and the slow python model."""
    path = tmp_path_factory.mktemp("other-repository")
    write_mlp(path, seed=7)
    write_slow_model(path)
    return path


@pytest.fixture(scope="session")
def other_server(other_repository, tmp_path_factory):
    with TritonServer([other_repository], workdir=tmp_path_factory.mktemp("other-server")) as server:
        yield server


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)
