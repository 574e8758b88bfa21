"""The local fallback server is a decision (``sonic/fallback.py``): a job that names its servers never turns
into a CPU server of its own unless its configuration asks (``fallback: always``); a site can forbid it
(``SONIC_HEP_FALLBACK=never``); a fallback that is taken is in the end-of-job report and the timing JSON, with
when, for which model and what every server said."""

from __future__ import annotations

import json
import re

import pytest
from sonic_hep.data.demo.models import write_mlp
from sonic_hep.framework.errors import ConfigError
from sonic_hep.framework.inference import InferenceConfig
from sonic_hep.framework.inference.sonic.fallback import FallbackPolicy

OFF = ("fallback: off (the job names its servers; services.inference.fallback: always would start a local CPU "
       "server when they cannot serve)")


@pytest.mark.parametrize("setting, named, site, allowed, refusal", [
    ("auto", False, "", True, ""),                # no server named: the local server is the job's server
    ("auto", True, "", False, OFF),               # servers named: never silently
    ("always", True, "", True, ""),               # asked for: also beside named servers
    (True, True, "", True, ""),                   # the former true
    (False, False, "", False, "fallback: off (services.inference.fallback: never)"),  # the former false
    ("always", True, "never", False, "fallback: forbidden on this site (SONIC_HEP_FALLBACK=never)"),
    ("auto", False, "never", False, "fallback: forbidden on this site (SONIC_HEP_FALLBACK=never)"),
])
def test_the_policy_table(setting, named, site, allowed, refusal):
    policy = FallbackPolicy.of(setting, named, {"SONIC_HEP_FALLBACK": site} if site else {})
    assert (policy.allowed, policy.refusal()) == (allowed, refusal)


def test_settings_read_old_and_new_values_and_bad_ones_are_one_line():
    assert InferenceConfig.from_dict({}).fallback == "auto"
    assert InferenceConfig.from_dict({"fallback": True}).fallback == "always"
    assert InferenceConfig.from_dict({"fallback": False}).fallback == "never"
    with pytest.raises(ConfigError, match=r"^services\.inference\.fallback: .*auto.*always.*never"):
        InferenceConfig.from_dict({"fallback": "sometimes"})
    with pytest.raises(ConfigError, match=r"^SONIC_HEP_FALLBACK='maybe': a site may only forbid"):
        FallbackPolicy.of("auto", False, {"SONIC_HEP_FALLBACK": "maybe"})
    with pytest.raises(ConfigError, match=r"^services\.inference\.fallback: no server to run on: the job names none "
                                          r"and services\.inference\.fallback is never; give --server"):
        FallbackPolicy.of("never", named=False, environ={}).check_start()


def test_a_job_naming_an_unreachable_server_fails_in_one_line_and_starts_no_server(sonic_cli, tmp_path):
    result = sonic_cli("run", "demo_inference", "-n", "5", "--no-progress", "--inference", "sonic",
                       "--server", "127.0.0.1:9", "-o", tmp_path / "out.root", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("sonic: error:")]
    assert len(errors) == 1 and "no server can run model 'demo_mlp': 127.0.0.1:9: down" in errors[0]
    assert OFF in errors[0]
    assert "fallback Triton server" not in result.stderr and "Triton server ready" not in result.stderr
    assert not (tmp_path / "out.root").exists()


def test_a_site_that_forbids_local_servers_fails_a_job_that_has_none_before_any_event(sonic_cli, tmp_path):
    result = sonic_cli("run", "demo_inference", "-n", "5", "--no-progress", "--inference", "sonic",
                       "-o", tmp_path / "out.root", env={"SONIC_HEP_FALLBACK": "never"}, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "sonic: error: services.inference.fallback: no server to run on: the job names none and "
        "SONIC_HEP_FALLBACK=never forbids local servers on this site; give --server HOST:PORT, "
        "services.inference.servers or --fleet DIR")


@pytest.mark.triton
def test_a_fallback_taken_mid_run_is_in_the_report_and_the_timing_json(demo_server, sonic_cli, tmp_path):
    """The only server serves other weights under the job's model name: with ``fallback: always`` the job's
    own copy answers through a local server, and the report says when, for which model and why."""
    write_mlp(tmp_path / "repo", seed=7)
    timing = tmp_path / "timing.json"
    common = ["run", "demo_inference", "-n", "50", "--no-progress", "--inference", "sonic", "--server",
              demo_server.grpc_url, "-p", f"services.inference.repository=[{tmp_path / 'repo'}]"]
    result = sonic_cli(*common, "-o", tmp_path / "out.root", "--timing-json", timing,
                       "-p", "services.inference.fallback=always",
                       "-p", f"services.inference.fallback_server={{workdir: '{tmp_path / 'fallback'}'}}")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(timing.read_text())["inference"]
    taken = report["fallback_taken"]
    assert [t["model"] for t in taken] == ["demo_mlp"] and taken[0]["after_s"] >= 0
    assert taken[0]["why"].startswith(f"{demo_server.grpc_url}: ") and "digest" in taken[0]["why"]
    assert report["fallback"]["grpc"] in report["models"]["demo_mlp"]["servers"]
    assert re.search(rf"fallback: local server {re.escape(report['fallback']['grpc'])} started [\d.]+ s into the job "
                     rf"for 'demo_mlp': {re.escape(demo_server.grpc_url)}: ", result.stdout), result.stdout

    forbidden = sonic_cli(*common, "-o", tmp_path / "forbidden.root", "-p", "services.inference.fallback=always",
                          env={"SONIC_HEP_FALLBACK": "never"})
    assert forbidden.returncode == 1 and "Triton server ready" not in forbidden.stderr
    assert "fallback: forbidden on this site (SONIC_HEP_FALLBACK=never)" in forbidden.stderr.splitlines()[-1]
