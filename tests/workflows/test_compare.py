"""``sonic compare``: equal files pass, any difference (value, count, branch, entries) is found."""

from __future__ import annotations

import awkward as ak
import numpy as np
import uproot

from sonic_hep.workflows.compare import compare_files


def write(path, pt, met, extra=None):
    with uproot.recreate(path) as f:
        branches = {"Jet": ak.zip({"pt": pt}), "MET_pt": met, **(extra or {})}
        f.mktree("Events", {k: (v.type.content if isinstance(v, ak.Array) else v.dtype) for k, v in branches.items()},
                 field_name=lambda o, i: f"{o}_{i}", counter_name=lambda c: f"n{c}").extend(branches)
    return str(path)


def test_compare(tmp_path, sonic_cli):
    pt = ak.Array([[1.0, 2.0], [], [3.5]])
    met = np.array([10.0, 20.0, 30.0], np.float32)
    a = write(tmp_path / "a.root", pt, met)
    same = write(tmp_path / "same.root", pt, met * (1 + 5e-6))   # 1.5e-4 absolute at 30, but 5e-6 relative
    assert compare_files(a, same).equal()
    assert not compare_files(a, same, rtol=0).equal()
    shifted = write(tmp_path / "shifted.root", pt, met + np.array([0, 0, 1e-3], np.float32))
    cmp = compare_files(a, shifted)
    assert not cmp.equal() and abs(cmp.max_abs_diff["MET_pt"] - 1e-3) < 1e-5 and cmp.outside["MET_pt"] == 1
    recount = write(tmp_path / "recount.root", ak.Array([[1.0], [2.0], [3.5]]), met)
    assert compare_files(a, recount).structure == ["Jet_pt"]
    extra = write(tmp_path / "extra.root", pt, met, {"x": np.zeros(3)})
    assert compare_files(a, extra).only_in_b == ["x"]
    ok = sonic_cli("compare", a, same)  # a largest difference above atol, within the relative part: the line says why
    assert ok.returncode == 0 and "OK at atol 1e-05, rtol 1e-05 (|a - b| ≤ atol + rtol·|b|)" in ok.stdout
    result = sonic_cli("compare", a, shifted)
    assert result.returncode == 1 and "DIFFERENT" in result.stdout
