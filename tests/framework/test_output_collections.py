"""A dict of per-event arrays is written as a collection (nX + X_field), whatever the chunk holds."""

from __future__ import annotations

import numpy as np
import uproot

from sonic_hep.framework.batch import stack as to_chunk_array
from sonic_hep.framework.output import writable


def test_equal_length_events_still_make_a_collection(tmp_path):
    # one event per chunk, or events that happen to have the same count, must not become fixed-size
    # arrays of records (uproot cannot write those)
    for values in ([{"a": np.arange(3.0), "b": np.ones(3, np.float32)}],
                   [{"a": np.arange(2.0), "b": np.ones(2, np.float32)}] * 2):
        array = to_chunk_array(values)
        branches = writable("S", array)
        with uproot.recreate(tmp_path / "c.root") as f:
            f.mktree("Events", {k: v.type.content for k, v in branches.items()},
                     field_name=lambda o, i: f"{o}_{i}", counter_name=lambda c: f"n{c}")
            f["Events"].extend(branches)
        with uproot.open(tmp_path / "c.root") as f:
            out = f["Events"].arrays(library="np")
        assert out["nS"].tolist() == [len(v["a"]) for v in values]
        assert np.array_equal(np.concatenate(out["S_a"]), np.concatenate([v["a"] for v in values]))


def test_dict_of_numbers_stays_flat():
    branches = writable("S", to_chunk_array([{"x": 1.0, "n": 2}, {"x": 3.0, "n": 4}]))
    assert sorted(branches) == ["S_n", "S_x"] and branches["S_x"].tolist() == [1.0, 3.0]
