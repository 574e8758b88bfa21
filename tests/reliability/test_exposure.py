"""Nothing exposed by accident — real servers, real certificates.

``--host`` binds gRPC only; HTTP and metrics stay on loopback unless asked; a non-loopback bind
without TLS warns; mutual TLS refuses clients without a certificate from the trusted CA; the banner
prints what the kernel says is bound; a plain client to a TLS server is told so; a fixed port in use
is one line naming the port and its holder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.framework.errors import InferenceError
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.framework.inference.serving.sockets import listening
from sonic_hep.framework.inference.tls_probe import hint, server_tls
from tests.polling import read_line

from tests.inference.conftest import sonic_client

pytestmark = pytest.mark.triton

CLI = [sys.executable, "-m", "sonic_hep.workflows.cli"]


def _openssl(folder: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=folder, timeout=60)


def _signed(folder: Path, name: str, ca: str, subject: str, extensions: str) -> dict[str, str]:
    """A key and a certificate for ``subject`` signed by the CA ``ca`` (files ``ca.pem``/``ca.key``)."""
    (folder / f"{name}.ext").write_text(extensions)
    _openssl(folder, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", subject)
    _openssl(folder, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext")
    return {"cert": str(folder / f"{name}.pem"), "key": str(folder / f"{name}.key")}


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, str]:
    """A CA, a server certificate for 127.0.0.1, a client certificate from the CA and one from a stranger CA."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed (make install-test installs it)")
    folder = tmp_path_factory.mktemp("pki")
    for ca in ("ca", "stranger"):
        _openssl(folder, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.pem",
                 "-days", "1", "-subj", f"/CN=sonic-test-{ca}")
    server = _signed(folder, "server", "ca", "/CN=localhost",
                     "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    client = _signed(folder, "client", "ca", "/CN=sonic-job", "extendedKeyUsage=clientAuth\n")
    rogue = _signed(folder, "rogue", "stranger", "/CN=intruder", "extendedKeyUsage=clientAuth\n")
    return {"ca": str(folder / "ca.pem"), "server_cert": server["cert"], "server_key": server["key"],
            "client_cert": client["cert"], "client_key": client["key"],
            "rogue_cert": rogue["cert"], "rogue_key": rogue["key"]}


def _non_loopback_address() -> str | None:
    """An address of this machine other machines could use (None when it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.200", 9))  # no packet is sent: only a route is chosen
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def _connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3):
            return True
    except OSError:
        return False


def test_host_binds_grpc_only_warns_without_tls_and_the_banner_prints_what_is_bound(tmp_path):
    env = {**os.environ, "SONIC_HEP_STATE": str(tmp_path / "state")}
    server = subprocess.Popen([*CLI, "server", "start", "-r", str(DEMO_REPOSITORY), "-m", "demo_sum", "--host", "0.0.0.0",
                               "--workdir", str(tmp_path / "work")], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        banner = read_line(server.stdout, 120)
        record = json.loads(next((tmp_path / "state").glob("*.json")).read_text())
        bound = listening(record["pid"])
        ports = {kind: int(record[kind].rsplit(":", 1)[1].split("/")[0]) for kind in ("grpc", "http")}
        ports["metrics"] = int(record["metrics"].rsplit(":", 1)[1].split("/")[0])
        hosts = {kind: {h for h, p in bound if p == port} for kind, port in ports.items()}
        assert hosts["grpc"] <= {"0.0.0.0", "::"} and hosts["grpc"], hosts
        assert hosts["http"] == {"127.0.0.1"} and hosts["metrics"] == {"127.0.0.1"}, hosts
        # the banner says exactly that
        assert f"http on 127.0.0.1:{ports['http']}" in banner and f"metrics on 127.0.0.1:{ports['metrics']}" in banner
        assert any(f"grpc on {h}:{ports['grpc']}" in banner for h in ("0.0.0.0", "[::]")), banner
        outside = _non_loopback_address()
        if outside:
            assert _connects(outside, ports["grpc"]) and not _connects(outside, ports["http"])
    finally:
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=60)
    warnings = [line for line in stderr.splitlines() if "reachable from other machines" in line]
    assert len(warnings) == 1 and "grpc" in warnings[0] and "without TLS" in warnings[0], stderr


def test_every_endpoint_off_loopback_without_tls_is_warned_about(tmp_path, pki):
    """No server needed: the warnings follow from the addresses asked for."""
    def warnings(**options) -> list[str]:
        return TritonServer([DEMO_REPOSITORY], workdir=tmp_path, **options).exposure_warnings()

    assert warnings() == []
    assert [w.split()[0] for w in warnings(host="0.0.0.0", http_host="0.0.0.0", metrics_host="::")] == \
        ["grpc", "http", "metrics"]
    tls = warnings(host="0.0.0.0", http_host="0.0.0.0", tls_cert=pki["server_cert"], tls_key=pki["server_key"])
    assert [w.split()[0] for w in tls] == ["http"]  # gRPC has TLS; HTTP never has


def test_mutual_tls_refuses_clients_without_a_certificate_from_the_ca(tmp_path, pki):
    x = np.random.default_rng(11).standard_normal((3, 4)).astype(np.float32)
    with TritonServer([DEMO_REPOSITORY], models=["demo_sum"], workdir=tmp_path / "work", tls_cert=pki["server_cert"],
                      tls_key=pki["server_key"], tls_root_cert=pki["ca"]) as server:
        def live(**credentials) -> bool:
            client = grpcclient.InferenceServerClient(server.grpc_url, ssl=True, root_certificates=pki["ca"],
                                                      **credentials)
            try:
                return client.is_server_live(client_timeout=5)
            except Exception:  # noqa: BLE001 - refused: tritonclient raises UNAVAILABLE
                return False
            finally:
                client.close()

        assert not live(), "a client without a certificate was served"
        assert not live(private_key=pki["rogue_key"], certificate_chain=pki["rogue_cert"]), \
            "a client certificate from another CA was accepted"
        assert live(private_key=pki["client_key"], certificate_chain=pki["client_cert"])

        job = sonic_client([{"address": "127.0.0.1", "port": server.ports["grpc"], "ssl": True,
                             "root_certificates": pki["ca"], "private_key": pki["client_key"],
                             "certificate_chain": pki["client_cert"]}], shared_memory="off")
        try:
            np.testing.assert_allclose(job.infer("demo_sum", {"x": x}).result(60)["y"], x.sum(axis=0), rtol=1e-5)
        finally:
            job.close()
        assert server.describe()["mutual_tls"]

        # a job whose client lacks TLS or the certificate is told so in one line, not "Socket closed"
        for spec, expected in (({}, "set ssl: true"),
                               ({"ssl": True, "root_certificates": pki["ca"]}, "requires a client certificate")):
            refused = sonic_client([{"address": "127.0.0.1", "port": server.ports["grpc"], **spec}], probe_timeout=3)
            try:
                with pytest.raises(InferenceError, match=expected) as caught:
                    refused.model_info("demo_sum")
                assert "Socket closed" not in str(caught.value)
            finally:
                refused.close()

        # a plain client is told that the server speaks TLS, in one line
        assert server_tls(server.grpc_url) == "mutual" and server_tls(server.http_url) is None
        status = subprocess.run([*CLI, "server", "status", server.grpc_url], capture_output=True, text=True,
                                timeout=60, env={**os.environ, "SONIC_HEP_STATE": str(tmp_path / "state")})
        assert status.returncode == 1
        assert status.stdout.strip().splitlines() == [
            f"{server.grpc_url}: unreachable over plain gRPC: the server speaks TLS (give --tls-ca)"]
        no_certificate = subprocess.run([*CLI, "server", "status", server.grpc_url, "--tls-ca", pki["ca"]],
                                        capture_output=True, text=True, timeout=60,
                                        env={**os.environ, "SONIC_HEP_STATE": str(tmp_path / "state")})
        assert no_certificate.stdout.strip().splitlines() == [
            f"{server.grpc_url}: refused: the server requires a client certificate (give --tls-client-cert and --tls-client-key)"]
        mutual = subprocess.run([*CLI, "server", "status", server.grpc_url, "--tls-ca", pki["ca"],
                                 "--tls-client-cert", pki["client_cert"], "--tls-client-key", pki["client_key"]],
                                capture_output=True, text=True, timeout=60,
                                env={**os.environ, "SONIC_HEP_STATE": str(tmp_path / "state")})
        assert mutual.returncode == 0 and f"{server.grpc_url}: live" in mutual.stdout, mutual.stdout + mutual.stderr


def test_tls_hints_name_what_the_client_must_change():
    assert hint(None, ssl=False, client_certificate=False) is None  # plain server: TLS explains nothing
    assert "set ssl: true" in hint("tls", ssl=False, client_certificate=False)
    assert "set ssl: true" in hint("mutual", ssl=False, client_certificate=False)
    assert "client certificate" in hint("mutual", ssl=True, client_certificate=False)
    assert hint("mutual", ssl=True, client_certificate=True) is None
    assert hint("tls", ssl=True, client_certificate=False) is None


def test_a_fixed_port_in_use_names_the_port_and_its_holder(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        expected = f"grpc port {port} on 127.0.0.1 is already in use by pid {os.getpid()}"

        with pytest.raises(InferenceError) as caught:
            TritonServer([DEMO_REPOSITORY], models=["demo_sum"], workdir=tmp_path / "work", grpc_port=port).start()
        message = str(caught.value)
        assert expected in message and "\n" not in message, message

        cli = subprocess.run([*CLI, "server", "start", "-r", str(DEMO_REPOSITORY), "-m", "demo_sum", "--grpc-port",
                              str(port), "--workdir", str(tmp_path / "cli")], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "SONIC_HEP_STATE": str(tmp_path / "state")})
    assert cli.returncode != 0
    errors = [line for line in cli.stderr.splitlines() if line.startswith("sonic: error")]
    assert len(errors) == 1 and expected in errors[0], cli.stderr
    assert "Traceback" not in cli.stderr and "meanwhile" not in cli.stderr
