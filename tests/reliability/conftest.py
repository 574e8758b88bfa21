"""Real servers for the reliability tests. Fixtures of one test file stay in that file; shared ones here."""

from __future__ import annotations

from pathlib import Path

import pytest

from sonic_hep.framework.inference.serving.server import TritonServer

PROJECT = Path(__file__).resolve().parents[2]

#: every repository the project ships that a CPU server loads (protodune_gpu is the GPU twin of
#: protodune, with the same model name, and runs torch on KIND_GPU)
CPU_REPOSITORIES = [PROJECT / "data" / "models" / name for name in ("demo", "miniaod", "protodune", "exatrkx")]


@pytest.fixture(scope="session")
def every_model_server(tmp_path_factory):
    """One server holding every shipped model that loads on CPU, shared by the tests that fuzz it."""
    with TritonServer(CPU_REPOSITORIES, workdir=tmp_path_factory.mktemp("every-model-server")) as server:
        yield server
