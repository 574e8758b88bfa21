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


@dataclass(frozen=True)
class ServerSpec:
    """Where a server is and how to talk to it (one entry of ``services.inference.servers``).

    Written as ``"host:port"`` or as a mapping::

        {address: host, port: 8001, ssl: true, root_certificates: ca.pem, private_key: key.pem,
         certificate_chain: cert.pem}
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
            known = {"address", "port", "ssl", "root_certificates", "private_key", "certificate_chain"}
            unknown = set(item) - known
            if unknown or "address" not in item:
                raise ConfigError(f"server entry {dict(item)} needs 'address' (and 'port'); known keys "
                                  f"{sorted(known)}", key=key)
            address = str(item["address"])
            if "port" in item:
                address = f"{address}:{int(item['port'])}"
            return cls(address, bool(item.get("ssl", False)), item.get("root_certificates"),
                       item.get("private_key"), item.get("certificate_chain"))
        raise ConfigError(f"server entry must be 'HOST:PORT' or a mapping, not {type(item).__name__}", key=key)

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0]

    @property
    def local(self) -> bool:
        """On this host (so system shared memory can be used)."""
        return self.host in LOCAL_HOSTS
