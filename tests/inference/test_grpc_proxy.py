"""A real HAProxy in front of a real Triton server: bearer tokens made by the test (RS256) checked by the proxy,
sent by both transports, refused in one line naming what to fix, read again when their file changes and never
logged; shared memory refused through the proxy; a server that cannot be reached behind it loses no call.

Skipped where HAProxy (2.5 or later, for ``jwt_verify``) is not installed: ``apt-get install haproxy``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from sonic_hep.framework.inference import InferenceConfig
from sonic_hep.framework.inference.serving import GrpcProxy, ProxyOptions, ProxyUnavailable, TokenRules
from sonic_hep.framework.inference.serving.grpc_proxy import haproxy_program
from sonic_hep.framework.inference.serving.haproxy_config import BackendTls, render
from sonic_hep.framework.inference.serving.sockets import free_port
from sonic_hep.framework.inference.server_spec import ServerSpec
from sonic_hep.framework.inference.sonic.bearer_token import BearerToken
from sonic_hep.framework.inference.sonic.client import SonicClient
from sonic_hep.framework.inference.sonic.connection import ServerConnection
from sonic_hep.framework.inference.triton_errors import NoServerError, RequestError
from tests.polling import wait_for
from tests.reliability.test_exposure import pki  # noqa: F401 - the fixture: a CA, server and client certificates
from tests.tokens import AUDIENCE, ISSUER, Issuer

pytestmark = [pytest.mark.triton, pytest.mark.timeout(180)]


def _haproxy() -> str:
    try:
        return haproxy_program(tokens=True)
    except ProxyUnavailable as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def issuers(tmp_path_factory) -> dict[str, Issuer]:
    folder = tmp_path_factory.mktemp("issuers")
    return {"site": Issuer.make(folder, "site"), "rogue": Issuer.make(folder, "rogue")}


@pytest.fixture(scope="module")
def proxy(demo_server, issuers, tmp_path_factory):
    """The proxy asking for tokens of the site's issuer, in front of the session's demo server."""
    _haproxy()
    rules = TokenRules(str(issuers["site"].public), ISSUER, AUDIENCE)
    with GrpcProxy(tmp_path_factory.mktemp("proxy"), ProxyOptions(tokens=rules)) as running:
        running.set_backends({"demo": demo_server.grpc_url})
        wait_for(lambda: running.backends()["demo"]["status"] == "UP", 30, "the proxy to see the server up")
        yield running


def config(token_file: Path | None = None, **settings) -> InferenceConfig:
    raw = {"mode": "sonic", "fallback": False, "breaker_backoff_s": 0.2, **settings}
    if token_file is not None:
        raw["token_file"] = str(token_file)
    return InferenceConfig.from_dict(raw)


@contextmanager
def opened(settings: InferenceConfig):
    client = SonicClient.from_config(settings, None)
    try:
        yield client
    finally:
        client.close()


def write(path: Path, token: str) -> Path:
    path.write_text(token + "\n")
    return path


@pytest.mark.parametrize("transport", ["native", "grpcio"])
def test_a_valid_token_is_served_through_the_proxy_on_both_transports(proxy, demo_server, issuers, tmp_path, rng,
                                                                      transport):
    x = rng.random((5, 16), dtype=np.float32)
    token = write(tmp_path / "token", issuers["site"].token())
    before = proxy.backends()["demo"]["calls"]
    with opened(config(token, servers=[proxy.address], transport=transport)) as client:
        through = client.infer("demo_mlp", {"x": x}).result()
        assert client.pool.states[0].connection.transport == transport  # the data plane carried the token
    with opened(config(servers=[demo_server.grpc_url])) as direct:
        expected = direct.infer("demo_mlp", {"x": x}).result()
    np.testing.assert_array_equal(through["probs"], expected["probs"])
    assert proxy.backends()["demo"]["calls"] > before


REFUSALS = {
    "missing": (None, "no bearer token: this service requires one", "this job has no bearer token"),
    "expired": ({"lifetime_s": -30}, f"the bearer token has expired: get a new one from {ISSUER}", "came from"),
    "audience": ({"audience": "another-service"}, f"not meant for this service: its audience must be {AUDIENCE}",
                 "came from"),
    "signature": ("rogue", f"was not signed by this service's issuer {ISSUER}", "came from"),
    "issuer": ({"issuer": "https://elsewhere.example"}, f"issued by another issuer, not {ISSUER}", "came from"),
    "not yet valid": ({"nbf": 2_000_000_000}, "not valid yet (nbf)", "came from"),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_a_refused_token_is_one_line_naming_what_to_fix(proxy, issuers, tmp_path, monkeypatch, rng, case):
    claims, said, hint = REFUSALS[case]
    if claims is None:  # no token anywhere discovery looks
        for name in ("BEARER_TOKEN", "BEARER_TOKEN_FILE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
        if Path(f"/tmp/bt_u{os.getuid()}").exists():
            pytest.skip(f"/tmp/bt_u{os.getuid()} exists on this machine: this job would present it")
        token_file = None
    else:
        issuer = issuers["rogue" if claims == "rogue" else "site"]
        token_file = write(tmp_path / "token", issuer.token(**({} if claims == "rogue" else claims)))
    with opened(config(token_file, servers=[proxy.address])) as client:
        with pytest.raises(NoServerError) as refused:
            client.infer("demo_mlp", {"x": rng.random((2, 16), dtype=np.float32)}).result()
    message = str(refused.value)
    assert "\n" not in message and "UNAUTHENTICATED" in message and said in message and hint in message, message
    if token_file is not None:
        assert str(token_file) in message  # which file to renew


@pytest.mark.parametrize("transport", ["native", "grpcio"])
def test_each_transport_carries_a_refusal_of_a_request_as_one_line(proxy, issuers, tmp_path, rng, transport):
    spec = ServerSpec(proxy.address)
    good = ServerConnection(spec, token=BearerToken("good", issuers["site"].token()))
    info = good.model_info("demo_mlp")
    expired = BearerToken(f"BEARER_TOKEN_FILE={tmp_path}/t", issuers["site"].token(lifetime_s=-5))
    bad = ServerConnection(spec, transport=transport, token=expired)
    try:
        assert bad.transport == transport
        with pytest.raises(RequestError) as refused:
            bad.send(info, {"x": rng.random((2, 16), dtype=np.float32)}, ["probs"]).result(timeout=30)
        assert refused.value.status == "UNAUTHENTICATED" and refused.value.action == "failover"
        assert "has expired" in str(refused.value) and f"BEARER_TOKEN_FILE={tmp_path}/t" in str(refused.value)
    finally:
        good.close()
        bad.close()


def test_an_http_401_without_grpc_status_is_unauthenticated_on_both_transports(demo_server, tmp_path, rng):
    """A proxy that refuses with a bare HTTP 401 (no gRPC status): gRPC's own mapping, on both transports."""
    program = _haproxy()
    port = free_port()
    (tmp_path / "bare.cfg").write_text(f"defaults\n    mode http\n    timeout client 10s\n    timeout connect 5s\n"
                                       f"    timeout server 10s\nfrontend bare\n    bind 127.0.0.1:{port} proto h2\n"
                                       "    http-request return status 401\n")
    process = subprocess.Popen([program, "-db", "-f", str(tmp_path / "bare.cfg")], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _listens(port), 30, "the bare proxy to listen")
        direct = ServerConnection(ServerSpec(demo_server.grpc_url))
        info = direct.model_info("demo_mlp")
        direct.close()
        for transport in ("native", "grpcio"):
            connection = ServerConnection(ServerSpec(f"127.0.0.1:{port}"), transport=transport)
            try:
                with pytest.raises(RequestError) as refused:
                    connection.send(info, {"x": rng.random((1, 16), dtype=np.float32)}, ["probs"]).result(timeout=30)
            finally:
                connection.close()
            assert refused.value.status == "UNAUTHENTICATED", (transport, str(refused.value))
            assert "this job has no bearer token" in str(refused.value)
    finally:
        process.kill()
        process.wait()


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_the_token_file_is_read_again_when_it_changes_and_never_logged(proxy, issuers, tmp_path, rng, caplog):
    expired, fresh = issuers["site"].token(lifetime_s=-5), issuers["site"].token()
    token_file = write(tmp_path / "token", expired)
    x = rng.random((3, 16), dtype=np.float32)
    with caplog.at_level(logging.DEBUG):
        with opened(config(token_file, servers=[proxy.address])) as client:
            with pytest.raises(NoServerError, match="has expired"):
                client.infer("demo_mlp", {"x": x}).result()
            write(tmp_path / "renewed", fresh).replace(token_file)  # a credential agent renews it

            def served() -> bool:
                try:
                    return client.infer("demo_mlp", {"x": x}).result()["probs"].shape == (3, 4)
                except NoServerError:
                    return False

            wait_for(served, 60, "the renewed token to be read and the server to come back")
    assert caplog.text and expired not in caplog.text and fresh not in caplog.text
    assert expired.split(".")[2] not in caplog.text and fresh.split(".")[2] not in caplog.text  # no signature either


def test_shared_memory_is_refused_through_the_proxy_and_requests_use_the_wire(proxy, issuers, tmp_path, rng):
    token = write(tmp_path / "token", issuers["site"].token())
    with opened(config(token, servers=[proxy.address], shared_memory="on")) as client:
        out = client.infer("demo_mlp", {"x": rng.random((64, 16), dtype=np.float32)}).result()
        connection = client.pool.states[0].connection
        assert out["probs"].shape == (64, 4)
        assert not connection.shm.usable() and "not offered through the proxy" in connection.shm.refused


def test_a_server_that_cannot_be_reached_behind_the_proxy_loses_no_call(demo_server, tmp_path, rng):
    """One server of two refuses connections (nothing listens there): every call that lands on it is sent to the
    other, and the proxy takes it out of the rotation; a server that left takes no call."""
    _haproxy()
    x = rng.random((2, 16), dtype=np.float32)
    with GrpcProxy(tmp_path / "proxy") as running:
        assert running.set_backends({"demo": demo_server.grpc_url, "dead": f"127.0.0.1:{free_port()}"}) == \
            [f"dead joined at {running.servers['dead']} (slot 1)", f"demo joined at {demo_server.grpc_url} (slot 2)"]
        with opened(config(servers=[running.address], allowed_tries=1)) as client:
            for _ in range(40):
                assert client.infer("demo_mlp", {"x": x}).result()["probs"].shape == (2, 4)
        assert running.backends()["demo"]["calls"] >= 40
        wait_for(lambda: running.backends()["dead"]["status"] == "DOWN", 30, "the proxy's checks to take it out")
        assert running.set_backends({"dead": running.servers["dead"]}) == ["demo left (slot 2)"]
        assert list(running.backends()) == ["dead"]
        with opened(config(servers=[running.address], allowed_tries=1)) as client:
            with pytest.raises(NoServerError, match="UNAVAILABLE"):  # the proxy has no server left to send it to
                client.infer("demo_mlp", {"x": x}).result()


def test_a_server_killed_under_load_behind_the_proxy_loses_no_call(tmp_path, rng):
    """Eight callers keep calls in flight on two servers; one is killed (SIGKILL) among them, and every caller gets
    every answer: the proxy sends again to the other server the calls the dead one had not begun to answer (and
    those sent to it before the proxy noticed); a call whose answer had begun when it died cannot be sent again by
    the proxy (the client has its first bytes), so it ends without a gRPC status and the client retries it."""
    from sonic_hep.data.demo.models import REPOSITORY
    from sonic_hep.framework.inference.serving import TritonServer

    _haproxy()
    x = rng.random((4, 16), dtype=np.float32)
    with TritonServer([REPOSITORY], models=["demo_mlp"], workdir=tmp_path / "a") as first, \
            TritonServer([REPOSITORY], models=["demo_mlp"], workdir=tmp_path / "b") as second, \
            GrpcProxy(tmp_path / "proxy") as running:
        running.set_backends({"first": first.grpc_url, "second": second.grpc_url})
        wait_for(lambda: all(b["status"] == "UP" for b in running.backends().values()), 30, "both servers up")
        client = SonicClient.from_config(config(servers=[running.address]), None)
        answers, errors, lock = [], [], threading.Lock()

        def caller() -> None:
            for _ in range(250):
                try:
                    value = client.infer("demo_mlp", {"x": x}).result()["probs"]
                except Exception as err:  # noqa: BLE001 - counted, and shown if any
                    with lock:
                        errors.append(err)
                    continue
                with lock:
                    answers.append(value)

        callers = [threading.Thread(target=caller) for _ in range(8)]
        for thread in callers:
            thread.start()
        wait_for(lambda: running.backends()["first"]["calls"] >= 100, 60, "calls on the first server")
        first.kill()
        for thread in callers:
            thread.join(120)
        client.close()
        shown = running.backends()  # failed_answers of "first": calls it held when it died, answered by "second"
        assert not errors and len(answers) == 8 * 250, (errors[:3], shown)
        np.testing.assert_allclose(answers[-1], answers[0])
        wait_for(lambda: running.backends()["first"]["status"] == "DOWN", 30, "the proxy's checks to take it out")


def test_the_proxy_speaks_tls_and_checks_its_options(proxy, issuers, pki, tmp_path, rng):  # noqa: F811 - fixture
    rules = TokenRules(str(issuers["site"].public), ISSUER, AUDIENCE)
    assert "clear text" in ProxyOptions(host="0.0.0.0", tokens=rules).problem()
    assert "audience" in ProxyOptions(tokens=TokenRules(rules.key, ISSUER, "")).problem()
    assert "both a certificate and its key" in ProxyOptions(tls_cert=pki["server_cert"]).problem()
    # TLS to the servers, with the client certificate of mutual TLS: HAProxy accepts what is written
    bundle = tmp_path / "client.pem"
    bundle.write_text(Path(pki["client_cert"]).read_text() + Path(pki["client_key"]).read_text())
    text = render("127.0.0.1:1", tmp_path / "a.sock", 2, tokens=rules, backend_tls=BackendTls(pki["ca"], str(bundle)))
    (tmp_path / "check.cfg").write_text(text)
    assert subprocess.run([_haproxy(), "-c", "-f", str(tmp_path / "check.cfg")], capture_output=True, check=False).returncode == 0
    token = write(tmp_path / "token", issuers["site"].token())
    options = ProxyOptions(tls_cert=pki["server_cert"], tls_key=pki["server_key"], tokens=rules)
    with GrpcProxy(tmp_path / "tls-proxy", options) as secure:
        secure.set_backends(proxy.servers)
        wait_for(lambda: secure.backends()["demo"]["status"] == "UP", 30, "the TLS proxy to see the server up")
        spec = {"address": secure.address, "ssl": True, "root_certificates": pki["ca"]}
        with opened(config(token, servers=[spec])) as client:
            out = client.infer("demo_mlp", {"x": rng.random((2, 16), dtype=np.float32)}).result()
            assert client.pool.states[0].connection.transport == "grpcio" and out["probs"].shape == (2, 4)


def test_the_proxy_bench_measures_each_target_and_checks_every_call_was_served(sonic_cli, tmp_path):
    _haproxy()
    if shutil.which("h2load") is None:
        pytest.skip("h2load not installed (apt-get install nghttp2-client)")
    sonic_cli("bench", "proxy", "--requests", "300", "--rounds", "1", "--in-flight", "4", "--clients", "2",
              "--seconds", "0.3", "--out", tmp_path, check=True, timeout=300)
    rows = json.loads((tmp_path / "proxy.json").read_text())["rows"]
    assert sorted((r["tool"], r["target"]) for r in rows) == sorted(
        (tool, target) for tool in ("h2load", "SONIC client") for target in ("direct", "proxy", "proxy + token"))
    assert all(r["requests_per_s"] > 0 for r in rows)
    assert all(r["proxy_cpu_us"] > 0 for r in rows if r["tool"] == "h2load" and r["target"] != "direct")
    assert "| h2load | proxy + token | 4 |" in (tmp_path / "proxy.md").read_text()
