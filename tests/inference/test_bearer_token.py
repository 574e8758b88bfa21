"""The job's bearer token without a server: WLCG discovery order, a file read again when it changes, where it may
be sent, refusals told with what to fix, and the token itself never shown."""

from __future__ import annotations

import logging
import os

import pytest

from sonic_hep.framework.errors import ConfigError
from sonic_hep.framework.inference.server_spec import ServerSpec
from sonic_hep.framework.inference.sonic import bearer_token
from sonic_hep.framework.inference.sonic.bearer_token import BearerToken, discover, explain, for_server
from sonic_hep.framework.inference.triton_errors import RequestError, action_for

UID = 4_000_000_123  # no such user: /tmp/bt_u<UID> is this test's own


@pytest.fixture
def tmp_token(tmp_path):
    path = tmp_path / "token"
    path.write_text("  from-the-config-file\n")
    return path


@pytest.fixture
def tmp_default():
    path = f"/tmp/bt_u{UID}"
    yield path
    if os.path.exists(path):
        os.unlink(path)


def test_discovery_follows_the_wlcg_order_with_the_configured_file_first(tmp_path, tmp_token, tmp_default):
    runtime = tmp_path / "run"
    runtime.mkdir()
    (runtime / f"bt_u{UID}").write_text("from-xdg\n")
    named = tmp_path / "named"
    named.write_text("from-bearer-token-file")
    with open(tmp_default, "w") as out:
        out.write("from-tmp")
    env = {"BEARER_TOKEN": " from-env ", "BEARER_TOKEN_FILE": str(named), "XDG_RUNTIME_DIR": str(runtime)}

    def found(token_file: str = "", **environ: str) -> tuple[str, str]:
        token = discover(token_file, environ, UID)
        return token.origin, token.header()

    assert found(str(tmp_token), **env) == (f"services.inference.token_file={tmp_token}",
                                            "Bearer from-the-config-file")
    assert found(**env) == ("BEARER_TOKEN", "Bearer from-env")
    del env["BEARER_TOKEN"]
    assert found(**env) == (f"BEARER_TOKEN_FILE={named}", "Bearer from-bearer-token-file")
    del env["BEARER_TOKEN_FILE"]
    assert found(**env) == (str(runtime / f"bt_u{UID}"), "Bearer from-xdg")
    assert found() == (tmp_default, "Bearer from-tmp")
    os.unlink(tmp_default)
    assert discover("", {}, UID) is None


def test_a_missing_named_file_is_one_line_in_the_config_and_a_warning_in_the_environment(tmp_path, caplog):
    with pytest.raises(ConfigError, match=r"services.inference.token_file.*bearer token file .*nothing does not exist"):
        discover(str(tmp_path / "nothing"), {}, UID)
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        discover(str(tmp_path / "empty"), {}, UID)
    runtime = tmp_path / "run"
    runtime.mkdir()
    (runtime / f"bt_u{UID}").write_text("from-xdg")
    with caplog.at_level(logging.WARNING):
        token = discover("", {"BEARER_TOKEN_FILE": str(tmp_path / "gone"), "XDG_RUNTIME_DIR": str(runtime)}, UID)
    assert token.header() == "Bearer from-xdg"  # discovery went on, as WLCG's does
    assert f"BEARER_TOKEN_FILE names {tmp_path / 'gone'}" in caplog.text


def test_the_file_is_read_again_when_it_changes_and_kept_while_it_is_gone(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(bearer_token, "RECHECK_S", 0.0)
    path = tmp_path / "token"
    path.write_text("first")
    token = discover(str(path), {}, UID)
    assert token.header() == "Bearer first"
    renewed = tmp_path / "renewed"
    renewed.write_text("second-token")
    renewed.replace(path)  # as a credential agent renews it: a new file renamed over the old
    assert token.header() == "Bearer second-token"
    path.unlink()
    with caplog.at_level(logging.WARNING):
        assert token.header() == "Bearer second-token"
        assert token.header() == "Bearer second-token"
    assert caplog.text.count("is gone") == 1
    path.write_text("third")
    assert token.header() == "Bearer third"


def test_the_token_goes_only_over_tls_or_to_loopback_and_is_never_shown(caplog):
    token = BearerToken("BEARER_TOKEN_FILE=/run/t", "s3cr3t-value")
    for spec in (ServerSpec("127.0.0.1:8001"), ServerSpec("localhost:8001"), ServerSpec("[::1]:8001"),
                 ServerSpec("127.0.1.1:8001"), ServerSpec("gpu.example.org:8001", ssl=True)):
        assert for_server(token, spec) == (token, ""), spec
    with caplog.at_level(logging.WARNING):
        sent, why = for_server(token, ServerSpec("gpu.example.org:8001"))
        for_server(token, ServerSpec("gpu.example.org:8001"))  # said once per server
    assert sent is None and "clear text" in why and "BEARER_TOKEN_FILE=/run/t" in why and "\n" not in why
    assert caplog.text.count("is not sent to gpu.example.org:8001") == 1
    assert "s3cr3t" not in caplog.text + repr(token) + str(token) + why


def test_a_refusal_says_where_the_token_came_from_or_where_it_was_looked_for():
    refused = RequestError("demo_mlp", "proxy:8001", "UNAUTHENTICATED", "the bearer token has expired", "failover")
    told = explain(refused, BearerToken("BEARER_TOKEN_FILE=/run/t", "x"))
    assert str(told) == ("model 'demo_mlp' on server proxy:8001: UNAUTHENTICATED: the bearer token has expired "
                         "(the token sent came from BEARER_TOKEN_FILE=/run/t)")
    assert "BEARER_TOKEN_FILE, $XDG_RUNTIME_DIR/bt_u<uid> or /tmp/bt_u<uid>" in str(explain(refused, None))
    assert "clear text" in str(explain(refused, None, "the bearer token (x) is not sent to h:1: ... clear text ..."))
    other = RequestError("demo_mlp", "proxy:8001", "UNAVAILABLE", "down", "failover")
    assert explain(other, None) is other
    # sending the same token again cannot help; another server may not ask for one
    assert action_for("UNAUTHENTICATED", "") == action_for("PERMISSION_DENIED", "") == "failover"
