"""Physics performance of the pipeline against the simulation truth: efficiency, fake and duplicate rates.

``ExaTrkXTrackMatching`` matches each event's candidates to its particles (:mod:`.matching`) and puts
the counts (written to the output tree, so any job's file can be re-summarised: :func:`summed_counts`);
``ExaTrkXPerformance`` sums them over the job, fills efficiency-vs-pT/η histograms and logs the
rates at the end of the job.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import hist
import numpy as np

from ...framework import Analyzer, InputTag, Output, Param, Producer
from .matching import MatchCounts, match_tracks, reconstructable_particles

log = logging.getLogger(__name__)


def summed_counts(tree: Any, collection: str = "Matching") -> MatchCounts:
    """The matching counts of an output tree summed over its events (``configs/exatrkx.yaml`` writes
    them as the ``Matching_*`` branches: ``matching:counts as Matching``)."""
    return MatchCounts(**{name: int(tree[f"{collection}_{name}"].array(library="np").sum())
                          for name in MatchCounts().as_dict()})


class ExaTrkXTrackMatching(Producer):
    """Matches track candidates to simulated particles (majority / double majority)."""

    hits = InputTag("Hit", fields=("particle",), doc="the hits, with their truth particle")
    particles = InputTag("Particle", fields=("pt", "eta", "primary"), doc="the simulated particles")
    hit_track = InputTag("tracks:hit_track", doc="candidate of each hit (ExaTrkXTrackCandidates)")
    candidates = InputTag("tracks:candidates", doc="the candidates, with their estimated pT")
    min_pt = Param(float, 1.0, doc="GeV: reconstructable particles and counted candidates are above it")
    min_hits = Param(int, 3, doc="hits a particle needs to be reconstructable")
    counts = Output("per-event counts: reconstructable, reconstructed, candidates, fakes, matched, duplicates")
    particle_status = Output("per particle: pt, eta, reconstructable (0/1), reconstructed (0/1)")

    def produce(self, event):
        particles = event.get(self.particles)
        pt, primary = np.asarray(particles.pt), np.asarray(particles.primary)
        hit_particle = np.asarray(event.get(self.hits).particle, dtype=np.int64)
        counts, reconstructed = match_tracks(event.get(self.hit_track), hit_particle, pt, primary,
                                             event.get(self.candidates)["pt"], self.min_pt, self.min_hits)
        reconstructable, _ = reconstructable_particles(hit_particle, pt, primary, self.min_pt, self.min_hits)
        event.put("counts", counts.as_dict())
        event.put("particle_status", {"pt": pt.astype(np.float32), "eta": np.asarray(particles.eta, np.float32),
                                      "reconstructable": reconstructable.astype(np.int8),
                                      "reconstructed": reconstructed.astype(np.int8)})


class ExaTrkXPerformance(Analyzer):
    """Sums the matching over the job; logs efficiency, fake and duplicate rates; efficiency histograms."""

    shared = True
    counts = InputTag("matching:counts", doc="per-event counts (ExaTrkXTrackMatching)")
    particle_status = InputTag("matching:particle_status", doc="per-particle status (ExaTrkXTrackMatching)")
    min_pt = Param(float, 1.0, doc="GeV, for the report's wording (set it as the matching's)")

    def begin_job(self):
        self._lock = threading.Lock()
        self.total = MatchCounts()
        axes = {"pt": hist.axis.Regular(20, 0.0, 10.0, name="pt", label="particle pT [GeV]"),
                "eta": hist.axis.Regular(24, -3.0, 3.0, name="eta", label="particle eta")}
        self._hists = {f"{what}_{var}": hist.Hist(axis) for var, axis in axes.items()
                       for what in ("reconstructable", "reconstructed")}

    def analyze(self, event):
        counts = MatchCounts(**event.get(self.counts))
        status = event.get(self.particle_status)
        good = status["reconstructable"] > 0
        found = good & (status["reconstructed"] > 0)
        with self._lock:
            self.total = self.total + counts
            for var in ("pt", "eta"):
                self._hists[f"reconstructable_{var}"].fill(status[var][good])
                self._hists[f"reconstructed_{var}"].fill(status[var][found])

    def histograms(self):
        return dict(self._hists)

    def end_job(self):
        log.info("Exa.TrkX (%s): %s", self.label, self.total.summary(self.min_pt))
