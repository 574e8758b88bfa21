"""Certificate problems are named in one line — expired, not yet valid, for another host, unknown CA — where a
client connects (gRPC says only "Socket closed" or OpenSSL's words) and where a server starts (an expired
certificate is refused, one not valid yet is warned about). Real certificates from ``openssl ca`` with dates
in the past and the future, real servers."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.framework.errors import InferenceError
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.framework.inference.tls_probe import own_certificate, validity, validity_problem
from tests.inference.conftest import sonic_client

SONIC = [sys.executable, "-m", "sonic_hep.workflows.cli"]
PAST = ("20200101000000Z", "20200102000000Z")
FUTURE = ("20980101000000Z", "20991231000000Z")
NOW = ("20200101000000Z", "20991231000000Z")
CA_CONFIG = """[ca]
default_ca = here
[here]
database = index
serial = serial
new_certs_dir = .
default_md = sha256
policy = any
unique_subject = no
[any]
commonName = supplied
"""


def _openssl(folder: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=folder, timeout=60)


def _issue(folder: Path, name: str, ca: str, extensions: str, dates: tuple[str, str]) -> None:
    """``name.pem``/``name.key`` signed by ``ca``, valid between ``dates`` (``openssl ca`` takes any dates)."""
    (folder / f"{name}.ext").write_text(extensions)
    _openssl(folder, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
    _openssl(folder, "ca", "-batch", "-config", "ca.cnf", "-cert", f"{ca}.pem", "-keyfile", f"{ca}.key", "-in",
             f"{name}.csr", "-out", f"{name}.pem", "-extfile", f"{name}.ext", "-startdate", dates[0], "-enddate",
             dates[1], "-notext")


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """Two CAs; server certificates for ``localhost`` only (valid, expired, not yet valid); client certificates."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed (make install-test installs it)")
    folder = tmp_path_factory.mktemp("pki")
    (folder / "ca.cnf").write_text(CA_CONFIG)
    (folder / "index").write_text("")
    (folder / "serial").write_text("01\n")
    for ca in ("ca", "stranger"):
        _openssl(folder, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2", "-subj", f"/CN=sonic-test-{ca}")
    server = "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n"
    client = "extendedKeyUsage=clientAuth\n"
    for name, ca, extensions, dates in (("server", "ca", server, NOW), ("server_expired", "ca", server, PAST),
                                        ("server_future", "ca", server, FUTURE), ("client", "ca", client, NOW),
                                        ("client_expired", "ca", client, PAST), ("rogue", "stranger", client, NOW)):
        _issue(folder, name, ca, extensions, dates)
    return folder


def test_validity_reads_the_dates_openssl_wrote(pki):
    assert validity(pki / "client_expired.pem") == (dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc),
                                                     dt.datetime(2020, 1, 2, tzinfo=dt.timezone.utc))
    assert validity(pki / "server_future.pem")[1] == dt.datetime(2099, 12, 31, tzinfo=dt.timezone.utc)
    assert validity(pki / "ca.key") is None and validity(pki / "missing.pem") is None
    assert validity_problem(pki / "client.pem", "it") is None
    assert validity_problem(pki / "client.pem", "it", now=dt.datetime(2100, 1, 1, tzinfo=dt.timezone.utc)) == \
        "it expired on 2099-12-31 00:00 UTC"
    assert own_certificate(str(pki / "server_future.pem"), "TLS certificate")[1].endswith(
        "is not valid before 2098-01-01 00:00 UTC: until then clients refuse it")


def test_a_server_refuses_to_start_with_an_expired_certificate(pki, tmp_path):
    started = subprocess.run([*SONIC, "server", "start", "-r", str(DEMO_REPOSITORY), "-m", "demo_sum", "--tls-cert",
                              str(pki / "server_expired.pem"), "--tls-key", str(pki / "server_expired.key")],
                             capture_output=True, text=True, timeout=120, start_new_session=True,
                             env={**os.environ, "SONIC_HEP_STATE": str(tmp_path / "state")})
    errors = [line for line in started.stderr.splitlines() if line.startswith("sonic")]
    assert started.returncode == 1, started.stderr
    assert errors == [f"sonic: error: TLS certificate {pki / 'server_expired.pem'} expired on 2020-01-02 00:00 UTC: "
                      "clients refuse it; renew it"], started.stderr


@pytest.mark.triton
def test_clients_are_told_which_certificate_is_wrong(pki, tmp_path, caplog):
    ca = str(pki / "ca.pem")

    def problem(port: int, host: str = "localhost", **tls) -> str:
        client = sonic_client([{"address": host, "port": port, "ssl": True, **tls}], probe_timeout=3)
        try:
            with pytest.raises(InferenceError) as refused:
                client.model_info("demo_sum")
            return str(refused.value)
        finally:
            client.close()

    with TritonServer([DEMO_REPOSITORY], models=["demo_sum"], workdir=tmp_path / "mutual", tls_root_cert=ca,
                      tls_cert=str(pki / "server.pem"), tls_key=str(pki / "server.key")) as server:
        port = server.ports["grpc"]
        expired = problem(port, root_certificates=ca, private_key=str(pki / "client_expired.key"),
                          certificate_chain=str(pki / "client_expired.pem"))
        assert f"the client certificate {pki / 'client_expired.pem'} expired on 2020-01-02 00:00 UTC" in expired
        rogue = problem(port, root_certificates=ca, private_key=str(pki / "rogue.key"),
                        certificate_chain=str(pki / "rogue.pem"))
        assert f"the server refused the client certificate {pki / 'rogue.pem'}" in rogue
        mutual = {"private_key": str(pki / "client.key"), "certificate_chain": str(pki / "client.pem")}
        assert "the server's certificate is not for '127.0.0.1'" in problem(port, "127.0.0.1", root_certificates=ca,
                                                                             **mutual)
        assert f"signed by a CA not in tls_ca {pki / 'stranger.pem'} (unknown CA)" in \
            problem(port, root_certificates=str(pki / "stranger.pem"), **mutual)
        for message in (expired, rogue):
            assert "Socket closed" not in message and "\n" not in message

        # the expired client certificate through the real command line: exit 1, one line naming the file
        job = subprocess.run([*SONIC, "run", "demo_inference", "-n", "2", "--no-progress", "-q", "-p",
                              "tagger.model=demo_sum", "-p", "services.inference.mode=sonic", "-p",
                              "services.inference.fallback=false", "-p",
                              f"services.inference.servers=[{{address: localhost, port: {port}, ssl: true, "
                              f"root_certificates: {ca}, private_key: {pki / 'client_expired.key'}, "
                              f"certificate_chain: {pki / 'client_expired.pem'}}}]"],
                             capture_output=True, text=True, timeout=180, cwd=tmp_path)
        errors = [line for line in job.stderr.splitlines() if line.startswith("sonic")]
        assert job.returncode == 1 and len(errors) == 1, job.stderr
        assert f"client certificate {pki / 'client_expired.pem'} expired on 2020-01-02" in errors[0]

    with TritonServer([DEMO_REPOSITORY], models=["demo_sum"], workdir=tmp_path / "future", tls_cert=str(
            pki / "server_future.pem"), tls_key=str(pki / "server_future.key")) as server:
        assert "is not valid before 2098-01-01 00:00 UTC" in caplog.text  # warned at its start
        assert "the server's certificate is not valid before 2098-01-01 00:00 UTC" in \
            problem(server.ports["grpc"], root_certificates=ca)
