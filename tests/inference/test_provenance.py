"""Provenance in every output: per model the digest of what answered, who answered and in which mode, the
events per call and the software; never a secret of the configuration. ``sonic merge`` refuses outputs
made by different models."""

from __future__ import annotations

import json
import shutil

import pytest
import uproot

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.data.demo.models import write_mlp
from sonic_hep.framework.inference.model_digest import model_digest
from sonic_hep.framework.inference.repository import ModelRepository
from sonic_hep.framework.provenance import REDACTED, digest_conflicts, merged, redact
from sonic_hep.workflows.grid.errors import GridError
from sonic_hep.workflows.grid.merge import check_same_models

SECRET = "s3cr3t-value-never-in-outputs"


def _metadata(path) -> dict:
    with uproot.open(path) as handle:
        return json.loads(str(handle["sonic_metadata"]))


def _run(sonic_cli, out, *extra: str) -> dict:
    result = sonic_cli("run", "demo_inference", "-o", out, "--max-events", "200", "--no-progress", "-q", *extra)
    assert result.returncode == 0, result.stderr
    return _metadata(out)


def test_direct_and_sonic_outputs_record_the_same_model_and_who_answered(tmp_path, demo_server, sonic_cli):
    direct = _run(sonic_cli, tmp_path / "direct.root",
                  "-p", f"services.inference.fallback_server.env={{API_TOKEN: {SECRET}}}")
    sonic = _run(sonic_cli, tmp_path / "sonic.root", "--inference", "sonic", "--server", demo_server.grpc_url)
    expected = model_digest(ModelRepository([DEMO_REPOSITORY]), "demo_mlp")
    d, s = direct["provenance"], sonic["provenance"]
    assert d["inference"]["demo_mlp"]["mode"] == "direct" and s["inference"]["demo_mlp"]["mode"] == "sonic"
    assert d["inference"]["demo_mlp"]["digest"] == s["inference"]["demo_mlp"]["digest"] == expected
    assert list(s["inference"]["demo_mlp"]["answers"]) == [demo_server.grpc_url]
    assert sum(s["inference"]["demo_mlp"]["answers"].values()) >= 1
    assert d["events_per_call"] >= 1 and {"sonic-hep", "numpy", "uproot", "python"} <= set(d["software"])
    assert SECRET not in json.dumps(direct)  # the configuration is recorded, its secrets are not
    assert direct["config"]["services"]["inference"]["fallback_server"]["env"]["API_TOKEN"] == REDACTED


def test_a_job_whose_only_server_has_other_weights_records_its_fallback(tmp_path, demo_server, sonic_cli):
    """The server serves another demo_mlp than the job's repository: the job's own copy answers, and the
    output says so (mode fallback, the job's digest)."""
    write_mlp(tmp_path / "repo", seed=7)
    mine = ModelRepository([tmp_path / "repo"])
    meta = _run(sonic_cli, tmp_path / "fallback.root", "--inference", "sonic", "--server", demo_server.grpc_url,
                "-p", f"services.inference.repository=[{tmp_path / 'repo'}]",
                "-p", "services.inference.fallback=always")  # a server is named: the fallback must be asked for
    entry = meta["provenance"]["inference"]["demo_mlp"]
    assert entry["mode"] == "fallback" and demo_server.grpc_url not in entry["answers"]
    assert entry["digest"] == model_digest(mine, "demo_mlp") != model_digest(ModelRepository([DEMO_REPOSITORY]),
                                                                             "demo_mlp")


def test_merge_refuses_outputs_of_different_models(tmp_path, sonic_cli):
    """Two real outputs, the second made with other weights under the same model name."""
    shutil.copytree(DEMO_REPOSITORY, tmp_path / "a")
    write_mlp(tmp_path / "b", seed=7)
    outputs = []
    for i, repo in enumerate(("a", "a", "b")):
        path = tmp_path / f"out{i}.root"
        _run(sonic_cli, path, "-p", f"services.inference.repository=[{tmp_path / repo}]")
        outputs.append((i, str(path), 200))

    class Named:
        directory = tmp_path / "task"

    check_same_models(Named(), outputs[:2])  # the same model: accepted
    with pytest.raises(GridError) as refused:
        check_same_models(Named(), outputs)
    message = str(refused.value)
    assert "\n" not in message and "model 'demo_mlp' differs: job 0 used md5:" in message and "job 2 used" in message


def test_redact_hides_secret_values_and_url_passwords():
    config = {"services": {"inference": {"servers": [{"address": "h", "token": SECRET}],
                                         "fleet_tls": {"private_key": "/k.pem"}}},
              "source": {"files": [f"https://user:{SECRET}@host/f.root", "plain.root"]},
              "options": {"streams": 2, "auth_header": ""}}
    clean = redact(config)
    assert SECRET not in json.dumps(clean)
    assert clean["services"]["inference"]["servers"][0] == {"address": "h", "token": REDACTED}
    assert clean["services"]["inference"]["fleet_tls"]["private_key"] == REDACTED
    assert clean["source"]["files"] == [f"https://user:{REDACTED}@host/f.root", "plain.root"]
    assert clean["options"] == {"streams": 2, "auth_header": ""}  # nothing secret in an empty value


def test_merged_provenance_sums_answers_and_conflicts_name_the_pieces():
    a = {"events_per_call": 10, "inference": {"m": {"mode": "sonic", "digest": "md5:1", "answers": {"s1": 3}}}}
    b = {"events_per_call": 20, "inference": {"m": {"mode": "fallback", "digest": "md5:1", "answers": {"s1": 1, "f": 2}}}}
    assert merged([a, b]) == {"events_per_call": [10, 20],
                              "inference": {"m": {"mode": "sonic+fallback", "digest": "md5:1",
                                                  "answers": {"s1": 4, "f": 2}}}}
    c = {"inference": {"m": {"digest": "md5:2"}}}
    assert digest_conflicts([("x", {"provenance": a}), ("y", {"provenance": b})]) is None
    assert digest_conflicts([("x", {"provenance": a}), ("z", {"provenance": c})]) == \
        "model 'm' differs: x used md5:1, z used md5:2"
