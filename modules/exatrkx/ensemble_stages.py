"""The ensemble's domain stages as the server runs them: graph building, edge selection, labeling.

Each function takes the model's name and the ``parameters`` of its repository entry (the working
point, :mod:`.working_point`) and returns the per-request computation on ``{name: array}``; the same
functions the per-stage producers call in-process. The Triton glue that runs them is
:mod:`sonic_hep.framework.inference.backends.python_stage`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from . import working_point
from .edge_selection import select_edges
from .graph_building import radius_graph
from .labeling import label_tracks

Run = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def graph_building(model: str, parameters: Mapping[str, str]) -> Run:
    """``embedding`` [hits, 8] → ``edge_index`` int64 [2, edges], ``num_hits`` int64 [1]."""
    point = working_point.read("graph_building", model, parameters)

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        embedding = inputs["embedding"]
        edges = radius_graph(embedding, point["radius"], point["k_max"])
        return {"edge_index": edges, "num_hits": np.array([len(embedding)], dtype=np.int64)}

    return run


def edge_selection(model: str, parameters: Mapping[str, str]) -> Run:
    """``edge_index`` [2, edges], ``score`` [edges] → ``kept_edge_index`` [2, kept] (filter score ≥ cut)."""
    point = working_point.read("edge_selection", model, parameters)

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        edges, _ = select_edges(inputs["edge_index"], inputs["score"], point["cut"])
        return {"kept_edge_index": edges}

    return run


def labeling(model: str, parameters: Mapping[str, str]) -> Run:
    """``num_hits`` [1], ``edge_index`` [2, edges], ``score`` [edges] → ``labels`` int64 [hits]."""
    point = working_point.read("labeling", model, parameters)

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        labels = label_tracks(int(inputs["num_hits"][0]), inputs["edge_index"], inputs["score"], point["cut"],
                              point["min_hits"])
        return {"labels": labels}

    return run
