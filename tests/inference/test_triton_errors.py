"""The retry/failover/fatal policy of triton_errors: a model failing on an input is fatal."""

from __future__ import annotations

import pytest

from sonic_hep.framework.inference.triton_errors import ACTIONS, action_for, convert


class FakeGrpcError(Exception):
    """What tritonclient raises: ``status()`` like "StatusCode.INTERNAL", ``message()``."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self._status, self._message = status, message

    def status(self) -> str:
        return f"StatusCode.{self._status}"

    def message(self) -> str:
        return self._message


@pytest.mark.parametrize("status, message, action", [
    # the model raised an error for this input: the same on every server
    ("INTERNAL", "model 'miniaod_deepmet': onnxruntime failed: [ONNXRuntimeError] : 2 : INVALID_ARGUMENT : "
                 "indices element out of data bounds, idx=1000000", "fatal"),
    ("INTERNAL", "in ensemble 'exatrkx_pipeline', model 'exatrkx_gnn': onnxruntime failed: modulo by zero", "fatal"),
    ("INVALID_ARGUMENT", "unexpected shape for input 'x' for model 'demo_mlp'. Expected [-1,16], got [1,17]", "fatal"),
    # the server, not the input: another server may serve it
    ("INTERNAL", "Failed to process the request(s) for model instance 'demo_mlp_0_0', message: Stub process "
                 "'demo_mlp_0_0' is not healthy.", "failover"),
    ("INTERNAL", "Received RST_STREAM with error code 2", "failover"),
    ("INVALID_ARGUMENT", "Unable to find system shared memory region: 'sonic_123_x_0'", "failover"),
    ("UNAVAILABLE", "failed to connect to all addresses", "failover"),
    ("NOT_FOUND", "Request for unknown model: 'demo_mlp' is not found", "failover"),
    # transient
    ("DEADLINE_EXCEEDED", "no answer within 1 s", "retry"),
    ("RESOURCE_EXHAUSTED", "queue is full", "retry"),
    ("UNKNOWN", "", "retry"),
    ("DATA_LOSS", "a status not in the table", "retry"),
])
def test_policy(status, message, action):
    assert action_for(status, message) == action
    err = convert(FakeGrpcError(status, message), "m", "127.0.0.1:8001")
    assert (err.status, err.action) == (status, action)
    assert str(err).startswith(f"model 'm' on server 127.0.0.1:8001: {status}: ")


def test_no_status_is_both_retried_and_fatal_by_accident():
    assert ACTIONS["INTERNAL"] == ACTIONS["INVALID_ARGUMENT"] == "fatal"
    assert ACTIONS["DEADLINE_EXCEEDED"] == "retry" and ACTIONS["UNAVAILABLE"] == "failover"
