"""SONIC both ways against a real Triton server: per stage and the ensemble give exactly the direct results."""

from __future__ import annotations

import numpy as np
import pytest
import uproot

from sonic_hep.framework.errors import InferenceError
from sonic_hep.framework.inference.server_spec import ServerSpec
from sonic_hep.framework.inference.direct import DirectClient
from sonic_hep.framework.inference.repository import ModelRepository
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.framework.inference.sonic.servers import ServerPool
from sonic_hep.framework.inference.sonic.client import SonicClient
from sonic_hep.modules.exatrkx import working_point
from sonic_hep.modules.exatrkx.edge_selection import select_edges
from sonic_hep.modules.exatrkx.features import HIT_FIELDS, hit_features
from sonic_hep.modules.exatrkx.graph_building import radius_graph
from sonic_hep.modules.exatrkx.labeling import label_tracks

from tests.exatrkx.conftest import REPOSITORY, run_workflow

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with TritonServer([REPOSITORY], workdir=tmp_path_factory.mktemp("exatrkx-server")) as server:
        yield server


def branches(path) -> dict[str, np.ndarray]:
    with uproot.open(path) as file:
        tree = file["Events"]
        return {name: tree[name].array(library="np") for name in tree.keys()
                if name.startswith(("HitTrack", "Track_", "nTrack", "Matching_"))}


def assert_same_output(a, b):
    left, right = branches(a), branches(b)
    assert left.keys() == right.keys() and "HitTrack" in left
    for name in left:
        for x, y in zip(left[name], right[name]):
            np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.mark.parametrize("labels", ["labeling:labels", "ensemble:labels"], ids=["per-stage", "ensemble"])
def test_sonic_equals_direct(server, events_file, direct_run, tmp_path, labels):
    result = run_workflow(events_file, tmp_path / "sonic.root", "services.inference.mode=sonic",
                          f"services.inference.servers=['{server.grpc_url}']", f"tracks.labels={labels}")
    assert_same_output(direct_run.output, result.output)
    served = result.timing.report()["inference"]["servers"]
    models = {model for per_server in served.values() for model in per_server}
    if labels == "ensemble:labels":  # one request per event, every stage ran on the server
        assert {"exatrkx_pipeline", "exatrkx_graph_building", "exatrkx_labeling"} <= models
    else:  # each ML stage its own request; graph building and labeling ran here
        assert models == {"exatrkx_embedding", "exatrkx_filter", "exatrkx_gnn"}


def test_ensemble_equals_a_hand_run_of_the_stage_functions(server, events_file):
    """One event sent to the ensemble gives the labels of the stage functions run here (onnxruntime + numpy)."""
    with uproot.open(events_file) as file:
        hits = file["Events"].arrays([f"Hit_{f}" for f in HIT_FIELDS], entry_stop=1, library="np")
    features = hit_features({f: hits[f"Hit_{f}"][0] for f in HIT_FIELDS})
    repository = ModelRepository([REPOSITORY])
    point = {stage: working_point.read(stage, f"exatrkx_{stage}", repository.get(f"exatrkx_{stage}").config)
             for stage in working_point.DECLARED}
    direct = DirectClient(repository)
    try:
        embedding = direct.run("exatrkx_embedding", {"features": features})["embedding"]
        edges = radius_graph(embedding, **point["graph_building"])
        score = direct.run("exatrkx_filter", {"features": features, "edge_index": edges})["score"]
        kept, _ = select_edges(edges, score, point["edge_selection"]["cut"])
        gnn = direct.run("exatrkx_gnn", {"features": features, "edge_index": kept})["score"]
    finally:
        direct.close()
    labels = label_tracks(len(features), kept, gnn, **point["labeling"])
    assert labels.max() > 100  # a real event: hundreds of candidates

    pool = ServerPool([ServerSpec.parse(server.grpc_url)], repository=repository, fallback=False)
    client = SonicClient(pool)
    try:
        out = client.infer("exatrkx_pipeline", {"features": features}).result()
    finally:
        client.close()
    np.testing.assert_array_equal(out["labels"], labels)


@pytest.mark.slow
def test_bench_prints_the_three_columns(server, sonic_cli, events_file, tmp_path):
    result = sonic_cli("bench", "exatrkx", "--input", events_file, "--out", tmp_path, "--server", server.grpc_url,
                       "-p", "source.max_events=3")
    assert result.returncode == 0, result.stderr
    table = (tmp_path / "exatrkx.md").read_text()
    assert "| stage | direct ms/evt | SONIC per stage ms/evt | SONIC ensemble (server) ms/evt |" in table
    for stage in ("embedding", "graph building", "filtering", "GNN", "labeling"):
        assert f"| {stage} |" in table
    assert "SONIC per stage: yes, SONIC ensemble (server): yes" in table


def test_model_metadata_from_the_server_equals_the_repository_entry(server):
    """Parameters (the working point) come from the server's config; what the modules read is the same
    in both modes, and an ensemble is refused only in direct mode."""
    repository = ModelRepository([REPOSITORY])
    direct = DirectClient(repository)
    client = SonicClient(ServerPool([ServerSpec.parse(server.grpc_url)], repository=repository, fallback=False))
    try:
        for stage in working_point.DECLARED:
            name = f"exatrkx_{stage}"
            remote = client.model_info(name)
            assert remote.path is None and remote.local is not None  # the server's config, the local entry beside it
            assert remote.parameters == direct.model_info(name).parameters and remote.parameters
        client.check_runnable("exatrkx_pipeline")
        with pytest.raises(InferenceError, match=r"model 'exatrkx_pipeline' is an ensemble.*services.inference.mode=sonic"):
            direct.check_runnable("exatrkx_pipeline")
    finally:
        client.close()
        direct.close()
