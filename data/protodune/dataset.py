"""Labelled patches for training and evaluating EmTrkMichelId, straight from the simulation.

Each event is simulated in memory (no ROOT round trip) and cut into patches by the same
:func:`~sonic_hep.modules.protodune.patches.make_patches` the producers use, so training sees
exactly what inference sees.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...modules.protodune.patches import PatchSpec, make_patches
from .readout import TRUTH_NONE, TRUTH_SHOWER, TRUTH_TRACK
from .simulate import Simulation


@dataclass
class Labelled:
    """Patches (uint8 ``[n, 48, 48, 1]``) with their hits' truth (0 track, 1 shower, 2 none) and Michel flags."""

    patches: np.ndarray
    truth: np.ndarray
    michel: np.ndarray

    def __len__(self) -> int:
        return len(self.truth)

    def take(self, index: np.ndarray) -> Labelled:
        return Labelled(self.patches[index], self.truth[index], self.michel[index])

    @classmethod
    def concat(cls, parts: list[Labelled]) -> Labelled:
        return cls(np.concatenate([p.patches for p in parts]), np.concatenate([p.truth for p in parts]),
                   np.concatenate([p.michel for p in parts]))


def event_patches(event: dict, spec: PatchSpec = PatchSpec()) -> Labelled:
    """Patches and truth of every hit of a simulated event (:meth:`Simulation.event`'s output)."""
    roi, hit = event["Roi"], event["Hit"]
    patches = make_patches(spec, roi["tpc"], roi["plane"], roi["wire"], roi["start"], roi["length"], event["Adc"],
                           hit["tpc"], hit["plane"], hit["wire"], hit["peak_tick"])
    return Labelled(patches, hit["truth"].astype(np.int64), hit["michel"].astype(bool))


def balanced(sample: Labelled, rng: np.random.Generator, limit: int | None = None) -> Labelled:
    """Keeps every shower, none and Michel hit and as many track hits as shower + none hits: cosmic
    muon tracks dominate raw events, and a classifier trained on them raw learns to say "track".
    ``limit`` caps the patches kept (a random subset of the balanced ones, for full-scale events)."""
    rare = (sample.truth != TRUTH_TRACK) | sample.michel
    tracks = np.flatnonzero(~rare)
    keep = rng.choice(tracks, size=min(len(tracks), max(int(rare.sum()), 1)), replace=False)
    chosen = np.concatenate([np.flatnonzero(rare), keep])
    if limit is not None and len(chosen) > limit:
        chosen = rng.choice(chosen, size=limit, replace=False)
    return sample.take(np.sort(chosen))


def simulate(sim: Simulation, seed: int, events: range, spec: PatchSpec = PatchSpec(),
             balance: bool = False, limit: int | None = None) -> Labelled:
    """Labelled patches of events ``events`` of random stream ``seed`` (event i uses ``(seed, i)``,
    as the generator does, so a held-out seed never shares an event with training); ``balance``
    and ``limit`` as in :func:`balanced`, per event."""
    rng = np.random.default_rng([seed, 999_999])
    parts = []
    for number in events:
        labelled = event_patches(sim.event(np.random.default_rng([seed, number])), spec)
        parts.append(balanced(labelled, rng, limit) if balance else labelled)
    return Labelled.concat(parts)


__all__ = ["Labelled", "TRUTH_NONE", "TRUTH_SHOWER", "TRUTH_TRACK", "balanced", "event_patches", "simulate"]
