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

A TLS client that still fails is told what is wrong with a certificate, in one line
(:func:`certificate_problem`): its own certificate expired or not yet valid (read from the file: a
gRPC server just hangs up on it), or the server's expired, not yet valid, for another host, or signed
by a CA the client does not trust (one handshake that verifies, as the client would). A server checks
its own certificate when it starts (:func:`own_certificate`). Dates are read with the ``ssl`` module
and a few lines of DER (:func:`validity`), as the project does not depend on ``cryptography``.
"""

from __future__ import annotations

import datetime as dt
import socket
import ssl
from pathlib import Path

TLS_HINT = "the server speaks TLS and this client does not: set ssl: true (and tls_ca) for it"
CERTIFICATE_HINT = ("the server requires a client certificate (mutual TLS): set tls_client_cert and tls_client_key "
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


# -- certificates ------------------------------------------------------------------------------------------
#: OpenSSL's verification results that mean "not signed by a CA this client trusts"
_UNKNOWN_CA = {2, 18, 19, 20, 21}
_EXPIRED, _NOT_YET_VALID, _HOST_MISMATCH, _IP_MISMATCH = 10, 9, 62, 64


def _element(der: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start, end) of the DER element at ``pos``: its content is ``der[start:end]``."""
    tag, length, pos = der[pos], der[pos + 1], pos + 2
    if length & 0x80:
        count = length & 0x7F
        length, pos = int.from_bytes(der[pos:pos + count], "big"), pos + count
    if pos + length > len(der):
        raise ValueError("truncated DER element")
    return tag, pos, pos + length


def _time(tag: int, text: str) -> dt.datetime:
    """An X.509 UTCTime (``YYMMDDHHMMSSZ``, years 50-99 are 19xx) or GeneralizedTime (``YYYYMMDDHHMMSSZ``)."""
    if tag == 0x17:
        year = int(text[:2])
        text = f"{year + (1900 if year >= 50 else 2000)}{text[2:]}"
    return dt.datetime.strptime(text, "%Y%m%d%H%M%SZ").replace(tzinfo=dt.timezone.utc)


def validity(certificate: bytes | str | Path) -> tuple[dt.datetime, dt.datetime] | None:
    """(not before, not after) of a certificate: DER bytes, or the first certificate of a PEM file; None when
    it cannot be read (the TLS library then says what is wrong with the file)."""
    try:
        if isinstance(certificate, bytes):
            der = certificate
        else:
            text = Path(certificate).read_text()
            begin = text.index(ssl.PEM_HEADER)
            end = text.index(ssl.PEM_FOOTER, begin) + len(ssl.PEM_FOOTER)
            der = ssl.PEM_cert_to_DER_cert(text[begin:end])
        _, body, _ = _element(der, 0)  # Certificate
        _, pos, _ = _element(der, body)  # TBSCertificate
        if der[pos] == 0xA0:  # [0] version
            pos = _element(der, pos)[2]
        for _ in range(3):  # serialNumber, signature, issuer
            pos = _element(der, pos)[2]
        _, pos, _ = _element(der, pos)  # Validity
        tag, start, end = _element(der, pos)
        not_before = _time(tag, der[start:end].decode("ascii"))
        tag, start, end = _element(der, end)
        return not_before, _time(tag, der[start:end].decode("ascii"))
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None


def _when(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def validity_problem(certificate: bytes | str | Path, what: str, now: dt.datetime | None = None) -> str | None:
    """``"<what> expired on <date>"`` or ``"<what> is not valid before <date>"``, or None (valid, or unreadable)."""
    dates = validity(certificate)
    if dates is None:
        return None
    now = now or dt.datetime.now(dt.timezone.utc)
    if now > dates[1]:
        return f"{what} expired on {_when(dates[1])}"
    if now < dates[0]:
        return f"{what} is not valid before {_when(dates[0])}"
    return None


def own_certificate(path: str, what: str, now: dt.datetime | None = None) -> tuple[str | None, str | None]:
    """(refusal, warning) about a certificate a server shows or trusts, for its start: an expired one is refused,
    as no client that verifies will accept it; one not valid yet is only warned about, as it may have been
    issued moments ago on a machine whose clock is ahead, and becomes usable by itself."""
    dates = validity(path)
    now = now or dt.datetime.now(dt.timezone.utc)
    if dates is None or dates[0] <= now <= dates[1]:
        return None, None
    if now > dates[1]:
        return f"{what} {path} expired on {_when(dates[1])}: clients refuse it; renew it", None
    return None, f"{what} {path} is not valid before {_when(dates[0])}: until then clients refuse it"


def _server_certificate(host: str, port: int, timeout: float) -> bytes | None:
    """The certificate the server shows (DER), read without verifying it."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, context.wrap_socket(raw) as tls:
            return tls.getpeercert(binary_form=True)
    except (OSError, ValueError):
        return None


def certificate_problem(address: str, root_certificates: str | None = None, private_key: str | None = None,
                        certificate_chain: str | None = None, timeout: float = 5.0) -> str | None:
    """What is wrong with a certificate between a TLS client with these settings and the server, in words
    (None when no certificate explains a failed connection).

    Args:
        address: ``host:port`` of the server, as the client names it (the host its certificate must name).
        root_certificates: the CAs the client trusts (None: the system's).
        private_key, certificate_chain: the client's own key and certificate, for mutual TLS.
    """
    if certificate_chain:
        own = validity_problem(certificate_chain, f"the client certificate {certificate_chain}")
        if own:
            return f"{own}: renew it"
    try:
        host, port = _split(address)
        context = ssl.create_default_context(cafile=root_certificates)
        if certificate_chain:
            context.load_cert_chain(certificate_chain, private_key)
    except (OSError, ValueError, ssl.SSLError):
        return None  # unreadable files: the TLS library's own message says which
    context.set_alpn_protocols(["h2"])
    trusted = f"tls_ca {root_certificates}" if root_certificates else "the system's CAs"
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                context.wrap_socket(raw, server_hostname=host) as tls:
            try:
                answered = tls.recv(1)
            except TimeoutError:  # no word either way: nothing to conclude
                return None
            except OSError:  # an alert or a reset: hung up
                answered = b""
            if answered:
                return None  # served (HTTP/2 settings): not a certificate problem
            if certificate_chain:  # a gRPC server hangs up on a client certificate it does not accept
                return (f"the server refused the client certificate {certificate_chain}: it must be signed by a "
                        f"CA the server trusts (its --tls-root-cert)")
            return None
    except ssl.SSLCertVerificationError as err:
        code = err.verify_code
        if code in (_EXPIRED, _NOT_YET_VALID):
            served = _server_certificate(host, port, timeout)
            dated = validity_problem(served, "the server's certificate") if served else None
            return dated or f"the server's certificate {err.verify_message}"
        if code in (_HOST_MISMATCH, _IP_MISMATCH):
            return f"the server's certificate is not for {host!r}: connect by a name it holds, or reissue it"
        if code in _UNKNOWN_CA:
            return f"the server's certificate is signed by a CA not in {trusted} (unknown CA)"
        return f"the server's certificate is refused: {err.verify_message}"
    except (OSError, ValueError):
        return None
