"""``sonic server status`` prints its model table in columns that stay aligned whatever the names' lengths
(a CMS repository's model names and backends are longer than the shipped ones). The server is a fake
tritonclient here: what is checked is the table's layout, not the server (tests/inference/test_server.py
asks a real one)."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import tritonclient.grpc as grpcclient

from sonic_hep.workflows.cli import server as server_cli

LONG = "particlenet_AK4_from_miniaod_puppi_v2_with_a_very_long_name"


class FakeServer:
    """Answers as a live Triton holding one short and one long model, each with its config's backend."""

    def __init__(self, *args, **kwargs):
        pass

    def is_server_live(self, **kwargs):
        return True

    def get_server_metadata(self, **kwargs):
        return SimpleNamespace(version="2.51.0")

    def get_model_repository_index(self, **kwargs):
        return SimpleNamespace(models=[SimpleNamespace(name="demo_mlp", version="1", state="READY", reason=""),
                                       SimpleNamespace(name=LONG, version="12", state="READY", reason="")])

    def get_model_config(self, name, **kwargs):
        backend = "onnxruntime (native, compiled on first use)" if name == LONG else "python"
        return SimpleNamespace(config=SimpleNamespace(backend=backend, platform=""))

    def close(self):
        pass


def test_columns_stay_aligned_with_long_model_names(monkeypatch, capsys):
    monkeypatch.setattr(grpcclient, "InferenceServerClient", FakeServer)
    monkeypatch.setattr(server_cli, "running_records", lambda: [])
    args = argparse.Namespace(address=["gpu01:8001"], tls_ca=None, tls_client_cert=None, tls_client_key=None)
    assert server_cli.status(args) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.split()[:1] == ["model"])
    rows = [line for line in lines if line.split()[:1] in (["demo_mlp"], [LONG])]
    assert len(rows) == 2
    for column in ("backend", "state"):
        start = header.index(column)
        for row in rows:  # every row's cell of that column starts where its heading does
            assert row[start - 1] == " " and row[start] != " ", f"{column!r} column broken:\n{header}\n{row}"
    assert all(row.rstrip().endswith("READY") for row in rows)
