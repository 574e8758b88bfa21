"""Input checks, request splitting and reassembly: shared by direct and SONIC (no server needed)."""

from __future__ import annotations

import numpy as np
import pytest

from sonic_hep.framework.errors import InferenceError
from sonic_hep.framework.inference.client import assemble, check_inputs, split_requests


def test_wrong_inputs_name_the_model_input_and_expectation(demo_repository):
    info = demo_repository.get("demo_mlp")
    with pytest.raises(InferenceError, match=r"model 'demo_mlp'.*missing \['x'\]"):
        check_inputs(info, {"y": np.zeros((2, 16), np.float32)})
    with pytest.raises(InferenceError, match=r"input 'x': dtype float64 but the model expects FP32"):
        check_inputs(info, {"x": np.zeros((2, 16))})
    with pytest.raises(InferenceError, match=r"input 'x': shape \[2, 15\] does not match \[batch, 16\]"):
        check_inputs(info, {"x": np.zeros((2, 15), np.float32)})
    with pytest.raises(InferenceError, match=r"has no output 'score'; outputs: \['logits', 'probs'\]"):
        check_inputs(info, {"x": np.zeros((2, 16), np.float32)}, outputs=["score"])


def test_batch_over_max_batch_size_is_split_in_order(demo_repository, rng):
    info = demo_repository.get("demo_mlp")  # max_batch_size 128
    x = rng.standard_normal((300, 16)).astype(np.float32)
    batch = check_inputs(info, {"x": x})
    requests = split_requests(info, {"x": x}, batch)
    assert [len(r["x"]) for r in requests] == [128, 128, 44]
    np.testing.assert_array_equal(np.concatenate([r["x"] for r in requests]), x)
    parts = [{"probs": r["x"][:, :4] * 2} for r in requests]
    np.testing.assert_array_equal(assemble(info, parts)["probs"], x[:, :4] * 2)


def test_ragged_entries_go_as_rectangular_requests(demo_repository, rng):
    info = demo_repository.get("demo_points")  # points [3, -1], max_batch_size 64
    lengths = [5, 5, 7, 3, 3, 3, 5]
    points = [rng.standard_normal((3, n)).astype(np.float32) for n in lengths]
    assert check_inputs(info, {"points": points}) == len(lengths)
    requests = split_requests(info, {"points": points}, len(lengths))
    assert [r["points"].shape for r in requests] == [(2, 3, 5), (1, 3, 7), (3, 3, 3), (1, 3, 5)]
    # per-entry outputs of equal shape are concatenated back in entry order
    parts = [{"score": r["points"][:, 0, :1]} for r in requests]
    np.testing.assert_array_equal(assemble(info, parts, ragged=True)["score"], np.array([p[0, :1] for p in points]))
    # ragged outputs stay a list, one array per entry
    parts = [{"echo": r["points"][:, 0, :]} for r in requests]
    out = assemble(info, parts, ragged=True)["echo"]
    assert [len(a) for a in out] == lengths
    with pytest.raises(InferenceError, match=r"input 'points': shape \[4, 5\] does not match \[3, -1\]"):
        check_inputs(info, {"points": points[:2] + [np.zeros((4, 5), np.float32)]})


def test_model_without_batch_dimension_gets_inputs_as_they_are(demo_repository, rng):
    info = demo_repository.get("demo_sum")  # max_batch_size 0, x [-1, 4]
    x = rng.standard_normal((10, 4)).astype(np.float32)
    assert check_inputs(info, {"x": x}) == 0
    assert len(split_requests(info, {"x": x}, 0)) == 1
    entries = [x[:3], x[:5]]
    requests = split_requests(info, {"x": entries}, check_inputs(info, {"x": entries}))
    assert [r["x"].shape for r in requests] == [(3, 4), (5, 4)]
    out = assemble(info, [{"y": r["x"].sum(0)} for r in requests], ragged=True)["y"]
    assert out.shape == (2, 4)
    with pytest.raises(InferenceError, match=r"shape \[10, 5\] does not match \[-1, 4\]"):
        check_inputs(info, {"x": np.zeros((10, 5), np.float32)})
