"""Generated events as training examples: hit features and truth per event, read with uproot."""

from __future__ import annotations

import os
from dataclasses import dataclass

import awkward as ak
import numpy as np
import uproot

from ...modules.exatrkx.features import HIT_FIELDS, hit_features
from ...modules.exatrkx.truth import true_edges


@dataclass
class TrainingEvent:
    """One event: features [N, F], hit truth, the true edges, and the particles' pT/primary flags."""

    features: np.ndarray
    particle: np.ndarray
    sequence: np.ndarray
    truth_edges: np.ndarray
    particle_pt: np.ndarray
    particle_primary: np.ndarray
    x: np.ndarray
    y: np.ndarray
    z: np.ndarray


def read_events(path: str | os.PathLike, max_events: int | None = None) -> list[TrainingEvent]:
    """Events of a file written by ``sonic data generate exatrkx``."""
    branches = [f"Hit_{f}" for f in (*HIT_FIELDS, "particle", "sequence")] + ["Particle_pt", "Particle_primary"]
    with uproot.open(path) as file:
        arrays = file["Events"].arrays(branches, entry_stop=max_events, library="ak")
    events = []
    for entry in arrays:
        hits = {f: ak.to_numpy(entry[f"Hit_{f}"]) for f in (*HIT_FIELDS, "particle", "sequence")}
        particle = hits["particle"].astype(np.int64)
        events.append(TrainingEvent(features=hit_features(hits), particle=particle, sequence=hits["sequence"],
                                    truth_edges=true_edges(particle, hits["sequence"]),
                                    particle_pt=ak.to_numpy(entry["Particle_pt"]),
                                    particle_primary=ak.to_numpy(entry["Particle_primary"]),
                                    x=hits["x"], y=hits["y"], z=hits["z"]))
    return events
