"""gRPC compression of SONIC requests (``framework/inference/compression.py``): chosen per client and per model,
carried by both transports, answers read bit for bit as without it, and fewer bytes on the wire.

What crosses the wire is counted by a relay between client and server (``tests/reliability/relay.py``): a
transport that accepted the setting but sent the message as it is would give the same answers, and only the
byte count tells it apart.
"""

from __future__ import annotations

import gzip
import zlib

import numpy as np
import pytest

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.framework.errors import ConfigError
from sonic_hep.framework.inference.compression import Compression, compress, decompress
from sonic_hep.framework.inference.server_spec import ServerSpec
from sonic_hep.framework.inference.service import InferenceConfig
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.framework.inference.sonic.connection import ServerConnection

from tests.inference.conftest import sonic_client
from tests.reliability.relay import Relay

TRANSPORTS = ["native", "grpcio"]


def padded(rows: int, seed: int = 1) -> np.ndarray:
    """Rows of 16 features of which 3 are set and the rest zero padding, as detector inputs often are."""
    x = np.zeros((rows, 16), np.float32)
    x[:, :3] = np.random.default_rng(seed).standard_normal((rows, 3))
    return x


# -- settings and codec (no server) ------------------------------------------------------------------------------
@pytest.mark.parametrize(("raw", "key", "culprit"), [
    ({"compression": "zip"}, "services.inference.compression", "'zip' is not one of ['none', 'gzip', 'deflate']"),
    ({"model_compression": {"pnet": "lz4"}}, "services.inference.model_compression.pnet",
     "unknown compression algorithm 'lz4'; choose one of none, gzip, deflate"),
])
def test_an_unknown_algorithm_is_one_line_naming_its_setting(raw, key, culprit):
    with pytest.raises(ConfigError) as error:
        InferenceConfig.from_dict(raw)
    assert error.value.key == key and culprit in str(error.value) and "\n" not in str(error.value)


def test_a_model_of_its_own_wins_over_the_client_setting():
    settings = InferenceConfig.from_dict({"compression": "deflate", "model_compression": {"big": "gzip",
                                                                                          "small": "none"}})
    chosen = Compression(settings.compression, settings.model_compression)
    assert [chosen.for_model(m) for m in ("big", "small", "other")] == ["gzip", "none", "deflate"]
    assert chosen.used and not Compression().used and Compression("none", {"a": "gzip"}).used


def test_the_codec_speaks_grpcs_encodings_and_skips_what_does_not_shrink():
    message = padded(64).tobytes()
    packed = {name: compress(message, name) for name in ("gzip", "deflate")}
    assert gzip.decompress(packed["gzip"]) == message  # gRPC's gzip: a gzip member (RFC 1952)
    assert zlib.decompress(packed["deflate"]) == message  # gRPC's deflate: a zlib stream (RFC 1950), not raw
    assert all(decompress(packed[name], name) == message for name in packed)
    assert compress(message, "none") is None
    assert compress(np.random.default_rng(2).bytes(4096), "gzip") is None  # noise: sent as it is, as gRPC does
    with pytest.raises(ValueError, match=r"^the answer is compressed with 'br', which this client does not decode"):
        decompress(packed["gzip"], "br")
    with pytest.raises(ValueError, match="the answer's deflate message does not decompress"):
        decompress(packed["gzip"], "deflate")


# -- against a real server ---------------------------------------------------------------------------------------
def sent_bytes(server_url: str, transport: str, compression: str | Compression, model: str,
               inputs: dict[str, np.ndarray], output: str) -> tuple[int, int, np.ndarray]:
    """(bytes to the server, bytes back, the answer) of one request through a counting relay."""
    with Relay(server_url) as relay:
        connection = ServerConnection(ServerSpec(relay.address), timeout_s=30, compression=compression,
                                      transport=transport)
        try:
            info = connection.model_info(model)
            before = dict(relay.forwarded)  # the control plane's calls (the model's config) left out
            answer = connection.send(info, inputs, [output]).result(30)[output]
            return relay.forwarded["up"] - before["up"], relay.forwarded["down"] - before["down"], answer
        finally:
            connection.close()


@pytest.mark.triton
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_compressed_requests_are_smaller_on_the_wire_and_answered_bit_for_bit(demo_server, transport):
    x = {"x": padded(128)}  # 8 KiB of inputs, mostly zeros
    plain_up, _, plain = sent_bytes(demo_server.grpc_url, transport, "none", "demo_mlp", x, "probs")
    assert plain_up > x["x"].nbytes
    for name in ("gzip", "deflate"):
        up, _, answer = sent_bytes(demo_server.grpc_url, transport, name, "demo_mlp", x, "probs")
        assert up < plain_up / 2, (name, up, plain_up)
        assert answer.tobytes() == plain.tobytes(), name  # lossless: the same bits as without compression


@pytest.mark.triton
def test_each_model_is_compressed_as_its_own_setting_says(demo_server, demo_repository):
    """One client, one connection: ``demo_sum`` compressed by its own setting, ``demo_mlp`` as the client says
    (not at all); the relay sees one request shrink and the other not."""
    with Relay(demo_server.grpc_url) as relay:
        client = sonic_client([relay.address], demo_repository, shared_memory="off", transport="native",
                              compression=Compression("none", {"demo_sum": "gzip"}))
        try:
            sizes = {}
            for model, inputs in (("demo_sum", {"x": np.zeros((2048, 4), np.float32)}),
                                  ("demo_mlp", {"x": padded(128)})):
                client.model_info(model)  # the config fetched before counting
                before = relay.forwarded["up"]
                client.infer(model, inputs).result(30)
                sizes[model] = (relay.forwarded["up"] - before, sum(a.nbytes for a in inputs.values()))
        finally:
            client.close()
    assert sizes["demo_sum"][0] < sizes["demo_sum"][1] / 10, sizes  # zeros: compressed to almost nothing
    assert sizes["demo_mlp"][0] > sizes["demo_mlp"][1], sizes  # sent as it is


@pytest.fixture(scope="module")
def compressing_server(tmp_path_factory):
    """A server told to compress its answers (Triton's ``--grpc-infer-response-compression-level``)."""
    with TritonServer([DEMO_REPOSITORY], models=["demo_mlp"], response_compression="low",
                      workdir=tmp_path_factory.mktemp("compressing-server")) as server:
        yield server


@pytest.mark.triton
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_answers_a_server_compressed_are_read_bit_for_bit(demo_server, compressing_server, transport):
    x = {"x": np.zeros((128, 16), np.float32)}  # every row alike: an answer that compresses
    _, plain_down, plain = sent_bytes(demo_server.grpc_url, transport, "none", "demo_mlp", x, "probs")
    _, down, answer = sent_bytes(compressing_server.grpc_url, transport, "none", "demo_mlp", x, "probs")
    assert down < plain_down / 2, (down, plain_down)  # the server did compress it
    assert answer.tobytes() == plain.tobytes()
