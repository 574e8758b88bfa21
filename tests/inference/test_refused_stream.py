"""A call a server (or a proxy whose server went away) refused without processing it, HTTP/2 REFUSED_STREAM, is
sent once more by the native transport, as gRPC's own clients do; refused again, it fails UNAVAILABLE. With a fake
channel: which stream a proxy refuses cannot be chosen (the end-to-end case is test_grpc_proxy.py's killed server)."""

from __future__ import annotations

from concurrent.futures import Future

from tritonclient.grpc import service_pb2 as pb

from sonic_hep.framework.inference.sonic.calls import CallLedger
from sonic_hep.framework.inference.sonic.transport import native

REFUSED = "the server refused the HTTP/2 stream without processing it (rst_stream REFUSED_STREAM)"


class FakeChannel:
    alive, reason = True, ""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def send(self, tag: int, message: bytes, encoding: str = "none", authorization: str = "") -> bool:
        self.sent.append(tag)
        return True


def test_a_refused_stream_is_sent_once_more_and_fails_when_refused_again(monkeypatch):
    transport = native.NativeTransport("127.0.0.1:1")
    channel = FakeChannel()
    monkeypatch.setattr(transport, "_open", lambda: channel)
    ledger = CallLedger("127.0.0.1:1", 30, lambda call, answer, error: ledger.finish(call, answer, error))
    calls = [ledger.open("m", pb.ModelInferRequest(model_name="m"), [], [], None, Future()) for _ in range(2)]
    futures = [call.future for call in calls]
    for call in calls:
        transport.send(call)
    transport._done(channel.sent[0], "UNAVAILABLE", REFUSED, b"", "")
    transport._done(channel.sent[1], "UNAVAILABLE", "the server reset the HTTP/2 stream (rst_stream, error code 2)",
                    b"", "")
    assert len(channel.sent) == 3 and not futures[0].done()  # the refused one went again, the other did not
    assert futures[1].exception().status == "UNAVAILABLE"
    transport._done(channel.sent[2], "UNAVAILABLE", REFUSED, b"", "")
    assert len(channel.sent) == 3 and futures[0].exception().status == "UNAVAILABLE"  # once only
    assert "REFUSED_STREAM" in str(futures[0].exception())
