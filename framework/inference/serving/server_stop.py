"""How long a server may take to stop, decided from what it serves rather than guessed.

A SIGTERM makes Triton refuse new requests (a model being stopped answers NOT_FOUND, which clients fail
over), let the requests it holds finish, then unload every model. The unload is the slow part on a server
with many instances: Triton destroys the instances of a model **one after the other**, and the python
backend spends a fixed second on each (``StubLauncher::UpdateHealth`` sleeps 1 s to see whether the stub
is still alive before it asks it to finalize) plus the stub's own exit (its interpreter, and on a GPU its
CUDA context and torch). Measured on 2 cores: 2.8 s for 1 instance, 5.8 s for 4, 20.8 s for 16 python
instances of a trivial model, about 1.2 s each. A 16-instance GPU server thus needs more than Triton's
default ``--exit-timeout-secs`` of 30 s, which also bounds the teardown: Triton gave up, exited with an
error, and the 30 s the client waited ran out at the same moment ("did not stop in 30 s; killing it"), so
the work folder was kept as after a crash.

So the bound is set deliberately: ``stop_timeout_s`` (``ServerOptions``) for the requests in flight, plus
:data:`TEARDOWN_S_PER_INSTANCE` for each model instance the server runs, is Triton's exit timeout; the
process gets :data:`MARGIN_S` more before it is killed. Under explicit model control the instances count
twice: a version loaded beside the served one (a fleet's rolling update) runs instances of its own. A stop
within that bound exits 0 and removes the work folder; only a server that still has not exited then is
killed and its folder kept for its log.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path

#: what one model instance's teardown may take: the python backend's fixed 1 s health check, the stub's exit
#: (interpreter, CUDA context, torch: ~0.2 s on a CPU here, longer on a GPU) and room for a busy machine
TEARDOWN_S_PER_INSTANCE = 3.0
#: how long past Triton's own exit timeout the process may take to exit before it is killed
MARGIN_S = 10.0


def instance_count(repo_dir: str | os.PathLike, names: Iterable[str]) -> int:
    """The model instances a server runs (each torn down in turn when it stops), from its runtime repository as
    written (``repo_dir/<model>/config.pbtxt``: counts already capped to the cores, groups placed on cards):
    every group's count, times its cards for a group listing several GPUs; a model without groups counts one."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    total = 0
    for name in names:
        config = text_format.Parse((Path(repo_dir) / name / "config.pbtxt").read_text(), mc.ModelConfig())
        total += sum(max(1, group.count) * max(1, len(group.gpus)) for group in config.instance_group) or 1
    return max(1, total)


def exit_timeout_s(stop_timeout_s: float, instances: int) -> int:
    """Triton's ``--exit-timeout-secs`` (whole seconds): the requests' time and every instance's teardown."""
    return math.ceil(stop_timeout_s + TEARDOWN_S_PER_INSTANCE * instances)


def server_exit_timeout_s(repo_dir: str | os.PathLike, served: Iterable[str], stop_timeout_s: float,
                          explicit: bool) -> int:
    """Triton's exit timeout for the models a server serves now: ``stop_timeout_s`` for the requests in flight
    and an allowance per model instance; with explicit model control, versions loaded later run their own
    instances (two side by side during a rolling update), so each counts twice."""
    instances = instance_count(repo_dir, served) * (2 if explicit else 1)
    return exit_timeout_s(stop_timeout_s, instances)


def stop_bound_s(exit_timeout: int) -> float:
    """How long a stop waits for the process before it kills it."""
    return exit_timeout + MARGIN_S
