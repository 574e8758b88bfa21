"""The compiled transport of the SONIC data plane (``transport/grpc_h2.cc`` through ``transport/native.py``)
against a real Triton server: messages larger than HTTP/2's default windows, a server killed under open calls,
and the choice between it and grpcio (``connection.py``). The tests every transport must pass are in
``test_transport.py`` (parametrized over both); the reliability suite runs on it as the default."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

from sonic_hep.framework.errors import ConfigError
from sonic_hep.framework.inference.sonic import connection as connection_module
from sonic_hep.framework.inference.sonic.connection import ServerConnection
from sonic_hep.framework.inference.server_spec import ServerSpec
from sonic_hep.framework.inference.direct import DirectClient
from sonic_hep.framework.inference.repository import ModelRepository
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.framework.paths import PROJECT_ROOT
from sonic_hep.framework.inference.sonic.transport import native
from sonic_hep.framework.inference.triton_errors import RequestError

from tests.inference.conftest import write_slow_model

PROTODUNE = PROJECT_ROOT / "data" / "models" / "protodune"


@pytest.fixture(scope="module", autouse=True)
def built():
    """The transport itself (built here once; g++ and libnghttp2-14 come with the test machine's system deps)."""
    try:
        return native.transport_library()
    except native.TransportUnavailable as err:
        pytest.skip(f"the native transport cannot be built here: {err}")


@pytest.mark.triton
def test_megabytes_each_way_cross_the_native_transport_whole(tmp_path):
    """1000 ProtoDUNE patches (2.3 MB, 35 times HTTP/2's default window) in the gRPC message, no shared memory:
    the server gets every byte (its answer equals direct inference's on the same patches), twice in a row on
    one connection, and the answer's 4,000 scores come back whole."""
    patches = np.random.default_rng(3).integers(0, 255, (1000, 48, 48, 1), dtype=np.uint8)
    direct = DirectClient(ModelRepository([PROTODUNE]))
    expected = direct.run("emtrkmichelid", {"patches": patches})
    direct.close()
    with TritonServer([PROTODUNE], workdir=tmp_path / "server") as server:
        connection = ServerConnection(ServerSpec(server.grpc_url), timeout_s=120, shared_memory="off",
                                      transport="native")
        try:
            info = connection.model_info("emtrkmichelid")
            for _ in range(2):
                got = connection.send(info, {"patches": patches}, ["em_trk_none", "michel"]).result(120)
                for name in ("em_trk_none", "michel"):
                    assert got[name].shape == expected[name].shape
                    np.testing.assert_allclose(got[name], expected[name], rtol=0, atol=1e-5)
        finally:
            connection.close()


@pytest.mark.triton
def test_a_server_killed_under_open_calls_fails_them_unavailable_and_a_new_server_is_reached(tmp_path):
    """Calls open on a server that is SIGKILLed end at once with UNAVAILABLE (to be failed over), saying the
    connection ended, not at their deadline; the connection then opens a new HTTP/2 connection by itself for
    a server started again on the same port."""
    write_slow_model(tmp_path / "repo")
    server = TritonServer([tmp_path / "repo"], workdir=tmp_path / "first").start()
    connection = ServerConnection(ServerSpec(server.grpc_url), timeout_s=300, transport="native")
    again = None
    try:
        info = connection.model_info("slow")
        started = time.monotonic()
        open_calls = [connection.send(info, {"delay_ms": np.full((1, 1), 20000.0, np.float32)}, ["echo"])
                      for _ in range(3)]
        time.sleep(0.5)  # the calls reach the server
        port = int(server.grpc_url.rpartition(":")[2])
        server.kill()
        for future in open_calls:
            with pytest.raises(RequestError) as failed:
                future.result(60)
            assert failed.value.status == "UNAVAILABLE" and failed.value.action == "failover"
            assert "closed the connection" in str(failed.value) or "reading from the server" in str(failed.value)
        assert time.monotonic() - started < 20  # at the kill, not at the 20 s answer or the 300 s deadline
        assert connection.in_flight == 0
        again = TritonServer([tmp_path / "repo"], workdir=tmp_path / "second", grpc_port=port).start()
        answer = connection.send(info, {"delay_ms": np.full((2, 1), 1.0, np.float32)}, ["echo"]).result(60)
        np.testing.assert_array_equal(answer["echo"], np.full((2, 1), 1.0, np.float32))
    finally:
        connection.close()
        server.stop()
        if again is not None:
            again.stop()


def test_auto_uses_grpcio_with_one_notice_where_the_native_transport_is_unavailable(monkeypatch, caplog):
    """No compiler or no libnghttp2: ``auto`` says why once and uses grpcio; ``native`` is then an error naming
    the setting; TLS always goes through grpcio, compression no longer does (both transports compress)."""
    def unavailable():
        raise native.TransportUnavailable("no C++ compiler (apt-get install g++, or set CXX)")

    monkeypatch.setattr(native, "api", unavailable)
    monkeypatch.setattr(connection_module, "_said", set())
    spec = ServerSpec("127.0.0.1:1")
    with caplog.at_level(logging.INFO, logger=connection_module.__name__):
        first = ServerConnection(spec)
        second = ServerConnection(spec)
    assert first.transport == second.transport == "grpcio"
    notices = [r.getMessage() for r in caplog.records if "native transport" in r.getMessage()]
    assert notices == ["SONIC requests to 127.0.0.1:1 go through grpcio: the native transport is not used "
                       "(no C++ compiler (apt-get install g++, or set CXX))"]
    with pytest.raises(ConfigError, match=r"services\.inference\.transport.*cannot be used for 127\.0\.0\.1:1: "
                                          r"no C\+\+ compiler"):
        ServerConnection(spec, transport="native")
    monkeypatch.undo()
    assert ServerConnection(spec).transport == "native"
    assert ServerConnection(spec, compression="gzip").transport == "native"
    with pytest.raises(ConfigError, match="transport must be auto, native or grpcio, not 'h3'"):
        ServerConnection(spec, transport="h3")


def test_a_machine_without_libnghttp2_gets_one_line_saying_what_to_install(tmp_path, monkeypatch):
    """The build links libnghttp2 by its soname: without it, one line naming the package, and nothing cached."""
    monkeypatch.setattr(native, "LIBRARY", "libnghttp2_absent.so.99")
    monkeypatch.setattr(native, "library_cache_folders", lambda kind: [tmp_path / "cache"])
    with pytest.raises(native.TransportUnavailable, match=r"^no libnghttp2_absent\.so\.99 to link the compiled "
                                                          r"transport against \(apt-get install libnghttp2-14\)$"):
        native.transport_library()
    assert not list((tmp_path / "cache").rglob("*.so"))


def test_statuses_are_named_as_grpc_names_them():
    assert [native.status_name(code) for code in (0, 3, 4, 5, 13, 14, 16, 99)] == [
        "OK", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "INTERNAL", "UNAVAILABLE", "UNAUTHENTICATED",
        "UNKNOWN"]


@pytest.mark.triton
def test_a_forked_child_opens_its_own_connection_and_the_parent_keeps_its_own(tmp_path):
    """A connection used before ``fork``: the child's requests are answered on a connection of its own (the
    parent's I/O thread does not exist in the child, whose copy of the channel is therefore not alive), and the
    parent's connection still works afterwards."""
    import multiprocessing

    write_slow_model(tmp_path / "repo")
    with TritonServer([tmp_path / "repo"], workdir=tmp_path / "server") as server:
        connection = ServerConnection(ServerSpec(server.grpc_url), timeout_s=30, transport="native")
        try:
            info = connection.model_info("slow")
            ask = {"delay_ms": np.full((1, 1), 2.0, np.float32)}
            assert connection.send(info, ask, ["echo"]).result(30)["echo"][0, 0] == 2.0
            queue = multiprocessing.get_context("fork").Queue()

            def child() -> None:
                try:
                    queue.put(float(connection.send(info, ask, ["echo"]).result(20)["echo"][0, 0]))
                except Exception as err:  # noqa: BLE001 - reported to the parent
                    queue.put(repr(err))

            process = multiprocessing.get_context("fork").Process(target=child)
            process.start()
            process.join(60)
            assert queue.get(timeout=5) == 2.0
            assert connection.send(info, ask, ["echo"]).result(30)["echo"][0, 0] == 2.0
        finally:
            connection.close()
