"""HTTP/2 keepalive: a connection that went silent is found dead in seconds, not at the request deadline.

Why: a network partition (packets dropped, nobody closes the connection) or a host that froze says nothing.
TCP keeps retransmitting for many minutes, so without pings the only sign is ``timeout_s`` passing on every
request in flight, and a job waits that long before anything fails over. With pings, a connection with nothing
received for ``time_s`` gets an HTTP/2 PING; no answer within ``timeout_s`` more and the connection is closed:
its calls fail with UNAVAILABLE and a reason that says so (:func:`dead_by_keepalive` recognises it), the
server's circuit breaker opens at once (``servers.py``) and the requests go to another server or the fallback.

Both sides must agree. A gRPC server counts pings that come more often than it allows as "ping strikes" and,
past its limit, ends the connection with GOAWAY ``too_many_pings`` (Triton's defaults allow one ping per 5
minutes while it sends nothing, one per 2 hours on an idle connection); the client then pings half as often.
:data:`SERVER_FLAGS` make the servers this project starts accept any client that pings at most once per
:data:`MIN_TIME_S`. The server's own pings (to clients) are slow on purpose: a client it declares dead has its
calls cancelled, and Triton 2.51 can crash on cancelled calls, so a job paused for a few seconds (SIGSTOP, a
batch system's suspend) must not be cut off by the server.

Both transports use the same settings: grpcio through channel arguments (:meth:`Keepalive.channel_options`),
the native one through its own PING timer (``transport/grpc_h2.cc``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: defaults of ``services.inference.keepalive_s`` / ``keepalive_timeout_s``: a silent connection is dead after
#: at most their sum (6 s), well inside the default ``timeout_s`` of 60
TIME_S = 3.0
TIMEOUT_S = 3.0
#: the shortest ping period a client may use (the servers we start accept pings this often)
MIN_TIME_S = 1.0

#: what a connection closed by its keepalive says, lower-cased: the native transport's message, grpcio's
#: ("Stream removed (ping timeout)", or "keepalive watchdog timeout" in other gRPC versions)
MARKERS = ("keepalive", "ping timeout")

#: ``tritonserver`` flags of every server the project starts: clients may ping every ``MIN_TIME_S`` (half of it
#: is allowed, for timer jitter), with or without calls; the server pings clients silent for a minute
SERVER_FLAGS = (
    "--grpc-keepalive-permit-without-calls=1",
    f"--grpc-http2-min-recv-ping-interval-without-data={int(MIN_TIME_S * 1000 / 2)}",
    "--grpc-http2-max-ping-strikes=2",
    "--grpc-keepalive-time=60000",
    "--grpc-keepalive-timeout=20000",
    "--grpc-http2-max-pings-without-data=0",
)


@dataclass(frozen=True)
class Keepalive:
    """A client's pings.

    Args:
        time_s (float): ping after this long with nothing received (at least ``MIN_TIME_S``).
        timeout_s (float): no answer to the ping within this long: the connection is dead.
    """

    time_s: float = TIME_S
    timeout_s: float = TIMEOUT_S

    def __post_init__(self) -> None:
        if not self.time_s >= MIN_TIME_S:
            raise ValueError(f"keepalive time must be at least {MIN_TIME_S:g} s, not {self.time_s}")
        if not self.timeout_s > 0:
            raise ValueError(f"keepalive timeout must be positive, not {self.timeout_s}")

    def channel_options(self) -> list[tuple[str, int]]:
        """grpcio channel arguments: pings on idle connections too (a dead one is found before a request waits
        on it, and a stateful firewall keeps the flow), and without limit while a long call sends nothing.

        ``ping_timeout_ms`` too: gRPC sends one ping at a time, and its flow-control probe (BDP) pings after
        an answer arrives. When the link goes silent right then, the keepalive's ping waits behind that
        unanswered one and never starts its own timer (measured with grpcio 1.85: still waiting after 30 s);
        a timeout on every ping closes the connection all the same."""
        timeout_ms = int(self.timeout_s * 1000)
        return [("grpc.keepalive_time_ms", int(self.time_s * 1000)),
                ("grpc.keepalive_timeout_ms", timeout_ms),
                ("grpc.http2.ping_timeout_ms", timeout_ms),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.max_pings_without_data", 0)]


def dead_by_keepalive(message: str) -> bool:
    """Whether a failure's message says its connection was closed by a keepalive (no answer to a ping)."""
    text = message.lower()
    return any(marker in text for marker in MARKERS)
