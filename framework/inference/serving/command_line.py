"""The parts of the ``tritonserver`` command line that follow from one option each (TLS, the python stubs'
shared memory, a CPU-only server), kept apart from the process's life cycle in ``server.py``."""

from __future__ import annotations

import os
from collections.abc import Mapping


def tls_flags(tls: Mapping[str, str | None]) -> list[str]:
    """gRPC over TLS with the server's own certificate and key; mutual TLS when a root certificate for the
    clients' certificates is given."""
    if not tls.get("cert"):
        return []
    flags = [f"--grpc-server-cert={os.path.abspath(tls['cert'])}", f"--grpc-server-key={os.path.abspath(tls['key'])}"]
    if tls.get("root"):
        return [*flags, "--grpc-use-ssl-mutual=true", f"--grpc-root-cert={os.path.abspath(tls['root'])}"]
    return [*flags, "--grpc-use-ssl=true"]


def python_stub_flags(backends: list[str], shm_prefix: str, shm_mb: int | None) -> list[str]:
    """Each python-run backend's stub shared memory named after this server (so stop() can remove what a
    killed server leaves) and, with ``shm_mb``, sized up front: models whose executions carry tens of MB
    (ProtoDUNE patches merged by dynamic batching: ~36 MB per execution) would otherwise grow it step by step,
    each step a new mapping the GPU entry page-locks."""
    flags = []
    for backend in backends:
        flags.append(f"--backend-config={backend},shm-region-prefix-name={shm_prefix}")
        if shm_mb:
            size = shm_mb * 2**20
            flags += [f"--backend-config={backend},shm-default-byte-size={size}",
                      f"--backend-config={backend},shm-growth-byte-size={max(size // 4, 2**20)}"]
    return flags


#: a CPU-only server reserves no pinned or device memory (it would fail without a GPU, or take it from jobs)
CPU_ONLY_FLAGS = ["--pinned-memory-pool-byte-size=0", "--cuda-memory-pool-byte-size=0:0"]
