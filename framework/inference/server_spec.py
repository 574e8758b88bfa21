"""Where a Triton server is and how to reach it: one entry of ``services.inference.servers``, parsed once.

Why apart from the connection: the configuration, fleet discovery and the benchmarks name servers without
opening a channel to any of them, and a connection takes one of these already checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}

#: A client's TLS files, in the project's words (those of ``sonic fleet start``): the CA it trusts for the
#: server's certificate, and its own certificate and key for mutual TLS. A server's own files are
#: ``tls_cert`` / ``tls_key`` / ``tls_root_cert`` (``ServerOptions``); the client's names say whose file it is,
#: so no word means one thing to a server and another to a client. tritonclient's names (CMSSW's, too) are
#: read as the same files, so configurations written for tritonclient keep working.
CLIENT_TLS = {"tls_ca": "root_certificates", "tls_client_cert": "certificate_chain", "tls_client_key": "private_key"}


def client_tls(item: Mapping[str, Any], key: str) -> dict[str, str]:
    """``{root_certificates, certificate_chain, private_key}`` (tritonclient's arguments) from a mapping in
    either vocabulary; a file named twice, in both, is an error naming both keys."""
    found: dict[str, str] = {}
    for ours, theirs in CLIENT_TLS.items():
        if ours in item and theirs in item:
            raise ConfigError(f"{ours!r} and {theirs!r} name the same file; give one", key=key)
        value = item.get(ours, item.get(theirs))
        if value is not None:
            found[theirs] = str(value)
    return found


@dataclass(frozen=True)
class ServerSpec:
    """Where a server is and how to talk to it (one entry of ``services.inference.servers``).

    Written as ``"host:port"`` or as a mapping::

        {address: host, port: 8001, ssl: true, tls_ca: ca.pem, tls_client_cert: cert.pem,
         tls_client_key: key.pem}

    (``CLIENT_TLS``: tritonclient's ``root_certificates`` / ``certificate_chain`` / ``private_key`` are read too.)
    """

    address: str
    ssl: bool = False
    root_certificates: str | None = None
    private_key: str | None = None
    certificate_chain: str | None = None

    @classmethod
    def parse(cls, item: Any, key: str = "services.inference.servers") -> ServerSpec:
        if isinstance(item, ServerSpec):
            return item
        if isinstance(item, str):
            host, sep, port = item.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(f"server {item!r} must look like HOST:PORT", key=key)
            return cls(item)
        if isinstance(item, Mapping):
            known = {"address", "port", "ssl", *CLIENT_TLS, *CLIENT_TLS.values()}
            unknown = set(item) - known
            if unknown or "address" not in item:
                raise ConfigError(f"server entry {dict(item)} needs 'address' (and 'port'); known keys "
                                  f"{sorted(known - set(CLIENT_TLS.values()))}", key=key)
            address = str(item["address"])
            if "port" in item:
                address = f"{address}:{int(item['port'])}"
            return cls(address, bool(item.get("ssl", False)), **client_tls(item, key))
        raise ConfigError(f"server entry must be 'HOST:PORT' or a mapping, not {type(item).__name__}", key=key)

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0]

    @property
    def local(self) -> bool:
        """On this host (so system shared memory can be used)."""
        return self.host in LOCAL_HOSTS
