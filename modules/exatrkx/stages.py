"""The Exa.TrkX pipeline one stage per module: each ML stage is its own inference request.

::

    Hit ─► ExaTrkXFeatures ─► ExaTrkXEmbedding ─► ExaTrkXGraphBuilding ─► ExaTrkXEdgeFilter ─► ExaTrkXGNN ─► ExaTrkXLabeling
           (numpy)            (model request)     (cKDTree, local)        (request + cut)       (request)     (csgraph, local)

The ML stages are :class:`InferenceProducer` s: direct or SONIC is the inference service's choice.
Graph building and labeling run in-process with the same functions the ensemble's Triton python
models run, and with the working point of those models' repository entries (:mod:`.working_point`).
A stage with nothing to do (no hits, no edges) answers without a request, the same way in every mode.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Optional

import numpy as np

from ...framework import InputTag, Output, Param, Producer
from ...framework.inference import InferenceProducer, UsesModel
from . import working_point
from .edge_selection import select_edges
from .features import FEATURES, HIT_FIELDS, hit_features
from .graph_building import radius_graph
from .labeling import label_tracks


class _WorkingPointMixin(UsesModel, abstract=True):
    """Reads a stage's working point from its repository entry's parameters once per job (overrides
    from parameters); the inference client gives them the same way in every mode."""

    stage = ""

    def load_working_point(self, model: str, overrides: dict[str, Any]) -> dict[str, Any]:
        try:
            return working_point.read(self.stage, model, self.model_info(model).parameters, overrides)
        except Exception as err:
            err.add_note(f"while reading the working point of module '{self.label}'")
            raise


def request_edge_scores(module: InferenceProducer, event: Any, edges: np.ndarray) -> Future | dict[str, np.ndarray]:
    """An edge model's request (hit features + edges → a score per edge) for the filter and the GNN;
    with no edges the empty answer, without a request."""
    if edges.shape[1] == 0:
        return {"score": np.zeros(0, dtype=np.float32)}
    return module.infer({"features": event.get(module.features), "edge_index": edges})


class ExaTrkXFeatures(Producer):
    """Hit features for the models: scaled cylindrical coordinates and cluster shape."""

    hits = InputTag("Hit", fields=HIT_FIELDS, doc="the hits (TrackML-like collection from `sonic data generate exatrkx`)")
    features = Output(f"float32 [hits, {len(FEATURES)}]: {', '.join(FEATURES)}")

    def produce(self, event):
        event.put("features", hit_features(event.get(self.hits)))


class ExaTrkXEmbedding(InferenceProducer):
    """Embedding MLP: each hit to an 8-d space where hits of one track are close."""

    features = InputTag("features:features", doc="hit features (ExaTrkXFeatures)")
    model = Param(str, "exatrkx_embedding", doc="embedding model in the repository")
    embedding = Output("float32 [hits, 8]: the learned embedding")

    def acquire(self, event):
        features = event.get(self.features)
        if len(features) == 0:
            return {"embedding": np.zeros((0, 8), dtype=np.float32)}
        return self.infer({"features": features})

    def produce(self, event, result):
        event.put("embedding", result["embedding"])


class ExaTrkXGraphBuilding(_WorkingPointMixin, Producer):
    """Radius graph in the embedding space (scipy cKDTree), at most k_max neighbours per hit."""

    stage = "graph_building"
    embedding = InputTag("embedding:embedding", doc="hit embedding (ExaTrkXEmbedding)")
    model = Param(str, "exatrkx_graph_building", doc="repository entry holding the working point (radius, k_max)")
    radius = Param(Optional[float], None, doc="search radius; default: the model's parameter")
    k_max = Param(Optional[int], None, doc="neighbours kept per hit; default: the model's parameter")
    edge_index = Output("int64 [2, edges]: candidate edges, i < j")

    def begin_job(self):
        self.point = self.load_working_point(self.model, {"radius": self.radius, "k_max": self.k_max})

    def produce(self, event):
        embedding = event.get(self.embedding)
        event.put("edge_index", radius_graph(embedding, self.point["radius"], self.point["k_max"]))


class ExaTrkXEdgeFilter(_WorkingPointMixin, InferenceProducer):
    """Edge-filter MLP on the candidate edges, then the edges with a score above the cut."""

    stage = "edge_selection"
    features = InputTag("features:features", doc="hit features (ExaTrkXFeatures)")
    edges = InputTag("graph:edge_index", doc="candidate edges (ExaTrkXGraphBuilding)")
    model = Param(str, "exatrkx_filter", doc="filter model in the repository")
    selection = Param(str, "exatrkx_edge_selection", doc="repository entry holding the working point (cut)")
    cut = Param(Optional[float], None, doc="score cut; default: the selection model's parameter")
    edge_index = Output("int64 [2, kept]: the edges that pass the filter")
    score = Output("float32 [kept]: their filter scores")

    def begin_job(self):
        self.point = self.load_working_point(self.selection, {"cut": self.cut})

    def acquire(self, event):
        return request_edge_scores(self, event, event.get(self.edges))

    def produce(self, event, result):
        edges, score = select_edges(event.get(self.edges), result["score"], self.point["cut"])
        event.put("edge_index", edges)
        event.put("score", score)


class ExaTrkXGNN(InferenceProducer):
    """Interaction-network GNN: a score per filtered edge, after message passing over the graph."""

    features = InputTag("features:features", doc="hit features (ExaTrkXFeatures)")
    edges = InputTag("filter:edge_index", doc="filtered edges (ExaTrkXEdgeFilter)")
    model = Param(str, "exatrkx_gnn", doc="GNN model in the repository")
    score = Output("float32 [edges]: GNN edge score (probability that both hits are on one track)")

    def acquire(self, event):
        return request_edge_scores(self, event, event.get(self.edges))

    def produce(self, event, result):
        event.put("score", result["score"])


class ExaTrkXLabeling(_WorkingPointMixin, Producer):
    """Track candidates as connected components of the edges the GNN keeps (scipy.sparse.csgraph)."""

    stage = "labeling"
    features = InputTag("features:features", doc="hit features (for the number of hits)")
    edges = InputTag("filter:edge_index", doc="the edges the GNN scored")
    score = InputTag("gnn:score", doc="their GNN scores (ExaTrkXGNN)")
    model = Param(str, "exatrkx_labeling", doc="repository entry holding the working point (cut, min_hits)")
    cut = Param(Optional[float], None, doc="GNN score cut; default: the model's parameter")
    min_hits = Param(Optional[int], None, doc="smallest candidate; default: the model's parameter")
    labels = Output("int64 [hits]: track candidate of each hit, -1 for none")

    def begin_job(self):
        self.point = self.load_working_point(self.model, {"cut": self.cut, "min_hits": self.min_hits})

    def produce(self, event):
        labels = label_tracks(len(event.get(self.features)), event.get(self.edges), event.get(self.score),
                              self.point["cut"], self.point["min_hits"])
        event.put("labels", labels)
