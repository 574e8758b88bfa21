"""The module test bench (``framework/testing.py``): a model-running module under a fake client, under the real
direct client built from settings, and under a SONIC client on a real server, giving the same answers; a small DAG
run on given columns behaves as a job run on a ROOT file holding them."""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.framework.errors import ModuleError
from sonic_hep.framework.inference import ModelRepository
from sonic_hep.framework.inference.fake import FakeClient
from sonic_hep.framework.api import run
from sonic_hep.framework.output import branch_name
from sonic_hep.framework.testing import run_module, run_modules
from sonic_hep.modules.common.collections import CollectionSum, MinCountFilter
from sonic_hep.modules.common.synthetic import NullProducer
from sonic_hep.modules.demo.toy_jets import ToyJets
from sonic_hep.modules.demo.toy_tagger import ToyTagger

rng = np.random.default_rng(3)
JETS = ak.Array([rng.normal(size=(n, 16)).astype(np.float32) for n in (3, 0, 5, 1)])


def test_a_fake_client_answers_without_model_files():
    client = FakeClient()
    info = ModelRepository([DEMO_REPOSITORY]).get("demo_mlp")
    client.add(info, lambda x: {"probs": np.tile(np.float32([0.1, 0.2, 0.3, 0.4]), (len(x["x"]), 1))})
    run = run_module(ToyTagger, {"toyJets:jets": JETS}, label="tagger", inference=client, events_per_call=2)
    assert client.calls["demo_mlp"] == 2  # one request per call with jets: events 0-1 and 2-3
    assert ak.to_list(run.products["scores"][2].b) == pytest.approx([0.1] * 5)
    assert len(run.products["scores"][1]) == 0


def test_settings_build_the_real_client_and_equal_a_sonic_run(demo_server):
    direct = run_module(ToyTagger, {"toyJets:jets": JETS}, label="tagger",
                        inference={"mode": "direct", "repository": [str(DEMO_REPOSITORY)]})
    served = run_module(ToyTagger, {"toyJets:jets": JETS}, label="tagger",
                        inference={"mode": "sonic", "servers": [demo_server.grpc_url], "fallback": False,
                                   "repository": [str(DEMO_REPOSITORY)]})
    a, b = direct.stacked("scores"), served.stacked("scores")
    assert ak.num(a, axis=1).tolist() == [3, 0, 5, 1]
    np.testing.assert_allclose(ak.to_numpy(ak.flatten(a.uds)), ak.to_numpy(ak.flatten(b.uds)), rtol=1e-5, atol=1e-6)


def test_a_missing_service_names_the_module():
    with pytest.raises(ModuleError, match="tagger"):
        run_module(ToyTagger, {"toyJets:jets": JETS}, label="tagger")


# a columnar producer, a columnar filter, then a per-event producer that only events the filter kept reach
DAG = {"ht": {"type": CollectionSum, "min_pt": 20.0}, "two": {"type": MinCountFilter, "min_count": 2},
       "idx": {"type": NullProducer, "src": "ht:sum"}}
PTS = [[50.0, 30.0], [], [60.0], [25.0, 21.0, 5.0], [10.0, 90.0], [40.0, 35.0, 30.0], [19.0, 19.5]]


def test_a_dag_on_columns_equals_a_job_on_a_root_file_of_them(tmp_path):
    jets = ak.zip({"pt": PTS})
    options = {"events_per_call": 3}  # batches that straddle the filter's decisions
    bench = run_modules(DAG, {"Jet": jets}, options=options)
    assert bench.passed == [True, False, False, True, False, True, False]
    assert bench.visited("idx") == 3 and bench.visited("ht") == 7
    kept = [k for k, passed in enumerate(bench.passed) if passed]
    assert [v is not None for v in bench.products["idx:value"]] == bench.passed  # the filter stopped the rest

    import uproot

    source = tmp_path / "in.root"
    with uproot.recreate(source) as f:
        f["Events"] = {"Jet": jets}
    config = {"source": {"files": [str(source)]}, "options": options, "output": {"products": ["ht:sum", "idx:value"]},
              "modules": {label: {**spec, "type": spec["type"].__name__} for label, spec in DAG.items()}}
    job = run(config, output=str(tmp_path / "out.root"))
    assert (job.events, job.written) == (7, 3)
    written = uproot.open(job.output)["Events"].arrays(library="np")
    assert written[branch_name("idx:value")].tolist() == [bench.products["idx:value"][k] for k in kept] == kept
    assert written[branch_name("ht:sum")].tolist() == [bench.products["ht:sum"][k] for k in kept]


def test_a_dag_with_the_demo_tagger_under_a_fake_client():
    client = FakeClient()
    jets_sent: list[int] = []

    def answer(inputs):
        jets_sent.append(len(inputs["x"]))
        return {"probs": np.tile(np.float32([0.1, 0.2, 0.3, 0.4]), (len(inputs["x"]), 1))}

    client.add(ModelRepository([DEMO_REPOSITORY]).get("demo_mlp"), answer)
    pts = ak.zip({"pt": [[30.0], [], [10.0], [25.0]]})
    dag = {"one": {"type": MinCountFilter}, "toyJets": {"type": ToyJets}, "tagger": {"type": "ToyTagger"}}
    bench = run_modules(dag, {"Jet": pts}, inference=client)
    assert bench.passed == [True, False, False, True]
    made = bench.products["toyJets:jets"]
    assert [jets is None for jets in made] == [False, True, True, False]  # filtered events made no jets
    assert jets_sent == [len(made[0]) + len(made[3])]  # one request, with the kept events' jets only
    assert ak.to_list(bench.products["tagger:scores"][3].uds) == pytest.approx([0.3] * len(made[3]))
    assert bench.products["tagger:scores"][1] is None
