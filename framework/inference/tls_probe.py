"""Does a server speak TLS, and want a client certificate? — so a refused client is told why.

gRPC reports a plain connection to a TLS port, and a TLS connection without the client certificate a
mutual-TLS server requires, both as ``UNAVAILABLE: Socket closed``, which reads like a dead server.
When a connection fails, one TLS handshake tells the cases apart::

    server_tls("127.0.0.1:8001")     # "tls", "mutual" (client certificates required), or None
    hint(server_tls(address), ssl=False, client_certificate=False)   # the one line to show, or None

The handshake verifies nothing and sends no data: it only asks whether the other side answers in TLS
and, after the handshake, whether it hangs up on a client that showed no certificate (a TLS 1.3
server checks the certificate after the handshake and closes; a TLS 1.2 one fails the handshake with
an alert). A server that answers with HTTP/2 frames instead is serving that client.
"""

from __future__ import annotations

import socket
import ssl

TLS_HINT = "the server speaks TLS and this client does not: set ssl: true (and root_certificates) for it"
CERTIFICATE_HINT = ("the server requires a client certificate (mutual TLS): set private_key and certificate_chain "
                    "to a certificate its CA signed")


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def server_tls(address: str, timeout: float = 5.0) -> str | None:
    """``"mutual"`` (TLS wanting a client certificate), ``"tls"``, or None (plain, unreachable or unclear).

    Only asked after a connection failed, so it may wait: a mutual-TLS server on a loaded machine can take
    seconds to send the alert that tells it from a plain TLS one.
    """
    try:
        host, port = _split(address)
    except ValueError:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                context.wrap_socket(raw, do_handshake_on_connect=False) as tls:
            try:
                tls.do_handshake()
            except ssl.SSLError as err:
                reason = str(getattr(err, "reason", "") or err).upper()
                if "CERTIFICATE" in reason and "ALERT" in reason:
                    return "mutual"
                return "tls" if "ALERT" in reason else None
            try:
                return "tls" if tls.recv(1) else "mutual"  # HTTP/2 settings: served; hung up: refused
            except ssl.SSLError as err:
                return "mutual" if "CERTIFICATE" in str(err).upper() else "tls"
            except OSError:  # no word within the timeout: a TLS server waiting for the client
                return "tls"
    except (OSError, ValueError):
        return None


def speaks_tls(address: str, timeout: float = 5.0) -> bool:
    """True when ``host:port`` answers a TLS handshake in TLS."""
    return server_tls(address, timeout) is not None


def hint(mode: str | None, ssl: bool, client_certificate: bool) -> str | None:
    """What a client with these settings must change for a server in ``mode`` (None: nothing TLS can explain)."""
    if mode is not None and not ssl:
        return TLS_HINT
    if mode == "mutual" and not client_certificate:
        return CERTIFICATE_HINT
    return None
