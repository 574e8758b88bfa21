"""Truth matching of track candidates: tracking efficiency, fake rate and duplicate rate.

Definitions (the ones used for Exa.TrkX and ATLAS tracking studies):

* A candidate is **matched** to the particle that made more than half of its hits (majority).
* A particle is **reconstructable** if it is a primary with pT > ``min_pt`` and at least
  ``min_hits`` hits; it is **reconstructed** if a candidate is matched to it *and* holds more than
  half of the particle's hits (double majority). Efficiency = reconstructed / reconstructable.
* A candidate with an estimated pT > ``min_pt`` (:mod:`.track_parameters`) that is matched to no
  particle is a **fake**. Fake rate = fakes / such candidates.
* A candidate matched to a reconstructable particle that already has another matched candidate is
  a **duplicate**. Duplicate rate = duplicates / candidates matched to reconstructable particles.

Everything is counted with array operations over (candidate, particle) hit pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np


@dataclass
class MatchCounts:
    """Counts of one event (or summed over events); the rates are ratios of them."""

    reconstructable: int = 0
    reconstructed: int = 0
    candidates: int = 0
    fakes: int = 0
    matched: int = 0
    duplicates: int = 0

    def __add__(self, other: MatchCounts) -> MatchCounts:
        return MatchCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @property
    def efficiency(self) -> float:
        return self.reconstructed / self.reconstructable if self.reconstructable else float("nan")

    @property
    def fake_rate(self) -> float:
        return self.fakes / self.candidates if self.candidates else float("nan")

    @property
    def duplicate_rate(self) -> float:
        return self.duplicates / self.matched if self.matched else float("nan")

    def as_dict(self) -> dict[str, int]:
        return {f.name: int(getattr(self, f.name)) for f in fields(self)}

    def summary(self, min_pt: float) -> str:
        return (f"tracking efficiency {100 * self.efficiency:.2f}% ({self.reconstructed}/{self.reconstructable} "
                f"particles with pT > {min_pt:g} GeV), fake rate {100 * self.fake_rate:.2f}% "
                f"({self.fakes}/{self.candidates} candidates with pT > {min_pt:g} GeV), duplicate rate "
                f"{100 * self.duplicate_rate:.2f}% ({self.duplicates}/{self.matched})")


def reconstructable_particles(hit_particle: np.ndarray, particle_pt: np.ndarray, particle_primary: np.ndarray,
                              min_pt: float = 1.0, min_hits: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """``(reconstructable, hits_of_particle)`` per particle: primary, above ``min_pt``, with at least
    ``min_hits`` hits (``hit_particle`` is 1-based, 0 for noise)."""
    hits_of_particle = np.bincount(hit_particle, minlength=len(particle_pt) + 1)[1:]
    reconstructable = (particle_pt > min_pt) & (particle_primary > 0) & (hits_of_particle >= min_hits)
    return reconstructable, hits_of_particle


def match_tracks(labels: np.ndarray, hit_particle: np.ndarray, particle_pt: np.ndarray,
                 particle_primary: np.ndarray, track_pt: np.ndarray, min_pt: float = 1.0,
                 min_hits: int = 3) -> tuple[MatchCounts, np.ndarray]:
    """Matches one event's candidates to its particles.

    Args:
        labels: candidate of each hit (``-1``: none), candidates 0..T-1.
        hit_particle: 1-based particle index of each hit (0: noise).
        particle_pt, particle_primary: per particle (index ``id - 1``).
        track_pt: estimated pT of each candidate.
        min_pt: GeV threshold for particles and candidates.
        min_hits: hits a particle needs to be reconstructable.

    Returns:
        ``(counts, reconstructed)``: the event's counts and a bool per particle (double-majority match).
    """
    n_particles, n_tracks = len(particle_pt), len(track_pt)
    reconstructable, hits_of_particle = reconstructable_particles(hit_particle, particle_pt, particle_primary,
                                                                 min_pt, min_hits)
    reconstructed = np.zeros(n_particles, dtype=bool)
    if n_tracks == 0:
        return MatchCounts(reconstructable=int(reconstructable.sum())), reconstructed

    on = labels >= 0
    pair = labels[on] * (n_particles + 1) + hit_particle[on]
    keys, shared = np.unique(pair, return_counts=True)
    track, particle = keys // (n_particles + 1), keys % (n_particles + 1)
    # majority particle of each track: the pair with most shared hits (keys are sorted by track)
    best = np.lexsort((-shared, track))
    first = best[np.concatenate([[0], np.flatnonzero(np.diff(track[best])) + 1])]
    track_hits = np.bincount(labels[on], minlength=n_tracks)
    majority = np.zeros(n_tracks, dtype=np.int64)
    majority_hits = np.zeros(n_tracks, dtype=np.int64)
    majority[track[first]], majority_hits[track[first]] = particle[first], shared[first]
    matched = (majority > 0) & (2 * majority_hits > track_hits)

    double = matched & (2 * majority_hits > hits_of_particle[np.maximum(majority, 1) - 1])
    reconstructed[majority[double] - 1] = True
    reconstructed &= reconstructable

    to_reconstructable = matched & reconstructable[np.maximum(majority, 1) - 1]
    per_particle = np.bincount(majority[to_reconstructable], minlength=n_particles + 1)
    selected = track_pt > min_pt
    counts = MatchCounts(reconstructable=int(reconstructable.sum()), reconstructed=int(reconstructed.sum()),
                         candidates=int(selected.sum()), fakes=int((selected & ~matched).sum()),
                         matched=int(to_reconstructable.sum()),
                         duplicates=int(np.maximum(per_particle[1:] - 1, 0).sum()))
    return counts, reconstructed
