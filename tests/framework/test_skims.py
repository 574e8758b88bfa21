"""Copy-and-slim jobs on the CMS Open Data NanoAOD, through ``sonic run`` and a configuration file: no module at
all (a slim), or only a filter (a skim); the written branches equal the input's, event by event."""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest
import uproot

from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.errors import ConfigError

from tests.conftest import shared_path

pytestmark = pytest.mark.shared

KEEP = ["Jet", "MET_pt", "HLT_IsoMu22 as TriggerIsoMu22"]


@pytest.fixture(scope="module")
def nano() -> str:
    return str(shared_path("real", "root", "nanoAOD_2015_CMS_Open_Data_ttbar.root"))


def write_config(path, nano: str, out, modules: str = "") -> None:
    path.write_text(f"source: {{files: [{nano}], chunk_size: 64}}\n{modules}"
                    f"output: {{file: {out}, products: [{', '.join(KEEP)}]}}\n")


def written(out) -> dict[str, ak.Array]:
    with uproot.open(out) as f:
        return f["Events"].arrays(library="ak", how=dict)


def assert_copied(got: dict[str, ak.Array], truth: ak.Array, keep: np.ndarray) -> None:
    """Every Jet field, MET_pt and the renamed trigger bit of the kept events, and nothing else."""
    jet_fields = [k for k in truth.fields if k.startswith("Jet_")]
    assert sorted(got) == sorted(["run", "luminosityBlock", "event", "nJet", "MET_pt", "TriggerIsoMu22", *jet_fields])
    for name in ["event", "MET_pt", "nJet", *jet_fields]:
        assert ak.to_list(got[name]) == ak.to_list(truth[name][keep]), name
    assert ak.to_list(got["TriggerIsoMu22"]) == ak.to_list(truth.HLT_IsoMu22[keep])


def test_a_job_of_no_module_copies_the_chosen_branches(sonic_cli, tmp_path, nano):
    config, out = tmp_path / "slim.yaml", tmp_path / "slim.root"
    write_config(config, nano, out)
    result = sonic_cli("run", config, "--no-progress", "-q")
    assert result.returncode == 0, result.stderr
    assert f"processed 200 events, wrote 200 to {out}" in result.stderr
    truth = uproot.open(nano)["Events"].arrays(library="ak")
    assert_copied(written(out), truth, np.ones(200, dtype=bool))


def test_a_job_of_one_filter_copies_the_chosen_branches_of_the_events_it_keeps(sonic_cli, tmp_path, nano):
    config, out = tmp_path / "skim.yaml", tmp_path / "skim.root"
    write_config(config, nano, out, "modules: {muon: {type: MinCountFilter, src: Muon, min_pt: 25.0, min_count: 1}}\n")
    result = sonic_cli("run", config, "--no-progress", "-q")
    assert result.returncode == 0, result.stderr
    truth = uproot.open(nano)["Events"].arrays(library="ak")
    keep = ak.to_numpy(ak.sum(truth.Muon_pt >= 25.0, axis=1) >= 1)
    assert 0 < keep.sum() < 200  # the filter does decide
    assert f"processed 200 events, wrote {keep.sum()} to {out}" in result.stderr
    assert_copied(written(out), truth, keep)


def test_a_job_of_no_module_must_say_what_it_copies(tmp_path):
    for data in [{"source": {"files": ["x.root"]}}, {"modules": {}, "output": {"file": "o.root"}},
                 {"modules": None, "output": {"products": []}}]:
        with pytest.raises(ConfigError, match=r"modules: no modules to run and no output\.products to copy"):
            cfgmod.parse(data)
