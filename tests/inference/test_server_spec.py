"""A client's TLS files have one set of names (``tls_ca``, ``tls_client_cert``, ``tls_client_key``), distinct
from a server's own (``tls_cert``, ``tls_key``, ``tls_root_cert``); tritonclient's names are read as the same
files, and naming one file both ways is refused in one line."""

from __future__ import annotations

import pytest

from sonic_hep.framework.errors import ConfigError
from sonic_hep.framework.inference.server_spec import ServerSpec, client_tls

KEY = "services.inference.servers"


def test_the_project_names_reach_the_connection():
    spec = ServerSpec.parse({"address": "gpu01", "port": 8001, "ssl": True, "tls_ca": "ca.pem",
                             "tls_client_cert": "client.pem", "tls_client_key": "client.key"}, KEY)
    assert (spec.address, spec.ssl) == ("gpu01:8001", True)
    assert (spec.root_certificates, spec.certificate_chain, spec.private_key) == ("ca.pem", "client.pem", "client.key")


def test_tritonclient_names_are_the_same_files():
    ours = ServerSpec.parse({"address": "gpu01:8001", "ssl": True, "tls_ca": "ca.pem"}, KEY)
    theirs = ServerSpec.parse({"address": "gpu01:8001", "ssl": True, "root_certificates": "ca.pem"}, KEY)
    assert ours == theirs


def test_one_file_named_both_ways_is_refused():
    with pytest.raises(ConfigError, match=r"'tls_ca' and 'root_certificates' name the same file"):
        client_tls({"tls_ca": "a.pem", "root_certificates": "b.pem"}, KEY)


def test_a_server_word_in_a_client_entry_is_refused_naming_the_client_words():
    with pytest.raises(ConfigError) as info:
        ServerSpec.parse({"address": "gpu01:8001", "tls_cert": "client.pem"}, KEY)
    message = str(info.value)
    assert "tls_client_cert" in message and "\n" not in message
