"""Does a server speak TLS? — so that a plain client is told "use ssl: true", not "Socket closed".

gRPC reports a plain connection to a TLS port only as ``UNAVAILABLE: Socket closed`` (or a timeout),
which reads like a dead server. When a plain connection fails, one TLS handshake tells the two apart::

    speaks_tls("127.0.0.1:8001")      # True: a TLS server (with or without client certificates)

The handshake does not verify anything (it only asks whether the other side answers in TLS) and sends
no data; a server that wants client certificates either completes it (TLS 1.3) or answers with a TLS
alert, both of which count as TLS.
"""

from __future__ import annotations

import socket
import ssl

TLS_HINT = "the server speaks TLS and this client does not: set ssl: true (and root_certificates) for it"


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def speaks_tls(address: str, timeout: float = 2.0) -> bool:
    """True when ``host:port`` answers a TLS handshake in TLS; False when not, unreachable or unclear."""
    try:
        host, port = _split(address)
    except ValueError:
        return False
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                context.wrap_socket(raw, server_hostname=host if not host[0].isdigit() else None) as tls:
            tls.do_handshake()
            return True
    except ssl.SSLError as err:
        reason = str(getattr(err, "reason", "") or err).upper()
        return "ALERT" in reason or "CERTIFICATE_REQUIRED" in reason
    except (OSError, ValueError):
        return False
