"""The HAProxy configuration of a gRPC proxy in front of Triton servers (``grpc_proxy.py`` runs it).

Why HAProxy: it is in Debian (Envoy, which SuperSONIC uses, is not), speaks HTTP/2 on both sides, balances each
gRPC call on its own (not each connection), verifies JSON Web Tokens itself (``jwt_verify``, 2.5 and later) and
changes its servers at run time through its admin socket, so servers join and leave without a reload that
would cut the clients' long-lived connections. What this configuration asks of it:

* **calls spread over the servers**, the least busy first (``leastconn`` counts calls in flight per server);
* **no call lost to a server that dies**: a call whose server refused the connection or closed it before
  answering is sent again to another one (``retry-on``, ``option redispatch``; HAProxy keeps a copy of each
  request up to ``BUFFER_BYTES``, so larger ones are not retried by the proxy). A call whose answer had begun
  cannot be sent again here (the client has its first bytes): it ends without a gRPC status (UNKNOWN), which the
  client retries. A server is out of the rotation at its first connection error on a call (``observe layer4``),
  or after two failed checks one second apart;
* **tokens, when asked**: every call must carry ``authorization: Bearer <JWT>`` signed with RS256 by the
  issuer's key, not expired, not before its ``nbf``, from that issuer, for that audience. A call that fails a
  check is answered by the proxy itself with gRPC status UNAUTHENTICATED and a message naming the check, which
  the client shows in one line with where its token came from (``sonic/bearer_token.py``). HAProxy 2.6 reads
  ``aud`` as one string: a token whose ``aud`` is a list is refused;
* **no shared memory through it**: a region registered through the proxy lands on one server while the calls
  that name it go to any: the registration is refused (UNIMPLEMENTED), and clients send tensors in the message;
* **nothing secret in its log**: errors only, in HAProxy's HTTP log format, which shows no request header.

The servers are ``slots`` server-template entries, all in maintenance until the admin socket gives one an
address (``GrpcProxy.set_backends``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: the gRPC service of Triton's API, and its shared memory calls
SERVICE = "/inference.GRPCInferenceService/"
SHARED_MEMORY_CALLS = ("SystemSharedMemory", "CudaSharedMemory")

#: HAProxy's buffer: a request up to this size is kept, so it can be retried on another server. Larger buffers cost
#: HAProxy's CPU on every call (measured on 2 cores, 16 calls in flight: 20 µs per call at 16 KiB, 25 at 64 KiB, 45
#: at 128 KiB, 130 at 256 KiB)
BUFFER_BYTES = 64 * 1024

#: how long a stopping proxy lets calls in flight finish before it closes every connection
HARD_STOP_S = 30

#: gRPC status codes the proxy answers with
UNAUTHENTICATED, UNIMPLEMENTED = 16, 12

BACKEND = "triton"
SLOT = "s"


@dataclass(frozen=True)
class TokenRules:
    """What a token must be to pass the proxy.

    Args:
        key (str): the issuer's public key or certificate (PEM) that signs the tokens (RS256).
        issuer (str): the ``iss`` every token carries.
        audience (str): the ``aud`` every token carries: this service's name, so a token issued for something
            else is refused.
    """

    key: str
    issuer: str
    audience: str

    def problem(self) -> str | None:
        """What is wrong with the rules (one line), or None."""
        for name, value in (("issuer", self.issuer), ("audience", self.audience)):
            if not value:
                return f"a token {name} is needed with a token key (--token-{name})"
            if any(c in value for c in "\"'\\ %#") or not value.isprintable():
                return f"the token {name} {value!r} holds a character the proxy's rules cannot quote"
        if not Path(self.key).is_file():
            return f"the token key {self.key} does not exist"
        if "-----BEGIN" not in Path(self.key).read_text(errors="replace"):
            return f"the token key {self.key} is not PEM (a public key or certificate of the issuer)"
        return None


@dataclass(frozen=True)
class BackendTls:
    """TLS from the proxy to servers that speak TLS: the CA that signed them and the proxy's client
    certificate and key (mutual TLS) in one PEM file, as HAProxy reads it."""

    ca: str
    client_pem: str | None = None


def _reply(status: int, message: str) -> str:
    """A gRPC answer made by the proxy itself: HTTP 200 whose only headers carry the status (trailers-only)."""
    return (f'http-request return status 200 hdr grpc-status {status} '
            f'hdr grpc-message "{message}"')


def token_rules(rules: TokenRules) -> list[str]:
    """The frontend's checks of the bearer token, in the order a caller should fix them."""
    key, iss, aud = rules.key, rules.issuer, rules.audience
    refuse = lambda message: _reply(UNAUTHENTICATED, message)  # one line per check below
    return [
        "http-request set-var(txn.bearer) http_auth_bearer",
        refuse("no bearer token: this service requires one (authorization: Bearer)")
        + " unless { var(txn.bearer) -m found }",
        "http-request set-var(txn.alg) var(txn.bearer),jwt_header_query('$.alg')",
        refuse("the bearer token is not a JWT signed with RS256") + " unless { var(txn.alg) -m str RS256 }",
        refuse(f"the bearer token was not signed by this service's issuer {iss}: get one from it")
        + f' unless {{ var(txn.bearer),jwt_verify("RS256","{key}") -m int 1 }}',
        "http-request set-var(txn.now) date",
        "http-request set-var(txn.exp) var(txn.bearer),jwt_payload_query('$.exp','int')",
        refuse("the bearer token has no expiry time (exp)") + " unless { var(txn.exp) -m found }",
        "http-request set-var(txn.left) var(txn.exp),sub(txn.now)",
        refuse(f"the bearer token has expired: get a new one from {iss}") + " unless { var(txn.left) -m int gt 0 }",
        "http-request set-var(txn.nbf) var(txn.bearer),jwt_payload_query('$.nbf','int')",
        "http-request set-var(txn.early) var(txn.nbf),sub(txn.now)",
        refuse("the bearer token is not valid yet (nbf)") + " if { var(txn.nbf) -m found } { var(txn.early) -m int gt 0 }",
        refuse(f"the bearer token was issued by another issuer, not {iss}")
        + f" unless {{ var(txn.bearer),jwt_payload_query('$.iss') -m str {iss} }}",
        refuse(f"the bearer token is not meant for this service: its audience must be {aud}")
        + f" unless {{ var(txn.bearer),jwt_payload_query('$.aud') -m str {aud} }}",
    ]


def render(bind: str, admin_socket: Path, slots: int, tls_pem: str | None = None, tokens: TokenRules | None = None,
           backend_tls: BackendTls | None = None) -> str:
    """The configuration file's text.

    Args:
        bind (str): ``host:port`` the proxy listens on.
        admin_socket (Path): its admin socket (mode 600: only this user changes the servers).
        slots (int): servers it can hold at once.
        tls_pem (str | None): certificate and key (one PEM file) it presents to clients; None: clear text (h2c).
        tokens (TokenRules | None): the checks every call must pass; None: no token asked.
        backend_tls (BackendTls | None): TLS to the servers; None: clear text.
    """
    listen = f"bind {bind} ssl crt {tls_pem} alpn h2" if tls_pem else f"bind {bind} proto h2"
    shared_memory = " || ".join(f"{{ path_beg {SERVICE}{call} }}" for call in SHARED_MEMORY_CALLS)
    # a connection error seen on live calls takes the server out at once: leastconn would otherwise send the retries
    # of its calls straight back to it (a dead server has no calls in flight), until its checks fail
    server = "default-server proto h2 check inter 1s fall 2 rise 1 observe layer4 error-limit 1 on-error mark-down"
    if backend_tls is not None:
        server += f" ssl verify required ca-file {backend_tls.ca} alpn h2"
        if backend_tls.client_pem:
            server += f" crt {backend_tls.client_pem}"
    lines = [
        "# written by sonic-hep (framework/inference/serving/haproxy_config.py); servers change through the socket",
        "global",
        f"    stats socket {admin_socket} mode 600 level admin",
        f"    hard-stop-after {HARD_STOP_S}s",
        f"    tune.bufsize {BUFFER_BYTES}",
        "    log stderr format short local0 info",
        "defaults",
        "    mode http",
        "    log global",
        "    option httplog",
        "    option dontlognull",
        "    option dontlog-normal",
        "    timeout connect 5s",
        "    timeout client 1h",
        "    timeout server 10m",
        "frontend sonic",
        f"    {listen}",
        *(f"    {rule}" for rule in (token_rules(tokens) if tokens else [])),
        "    " + _reply(UNIMPLEMENTED, "shared memory is not offered through the proxy: each call may go to "
                                      "another server") + f" if {shared_memory}",
        f"    default_backend {BACKEND}",
        f"backend {BACKEND}",
        "    balance leastconn",
        "    retry-on all-retryable-errors",
        "    retries 3",
        "    option redispatch 1",
        f"    {server}",
        f"    server-template {SLOT} 1-{slots} 127.0.0.1:1 disabled",
        "",
    ]
    return "\n".join(lines)
