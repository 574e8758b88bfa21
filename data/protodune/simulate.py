"""One ProtoDUNE-SP readout window: particles → deposits → per-plane ROIs and hits.

::

    sim = Simulation.preset("small")
    event = sim.event(np.random.default_rng(7))
    event["Hit"]["truth"], event["Adc"]          # flat numpy arrays of one event

The event is a dict of NanoAOD-style collections (flat arrays of equal length per collection), which
is what ``generate.py`` writes and what the framework's ROOT source reads back:

* ``Roi``: ``tpc, plane, wire, start, length`` — one zero-suppressed region of interest per entry;
* ``Adc``: the ROI samples (int16 ADC), concatenated in ROI order (ROI ``i`` owns ``length[i]``
  samples starting at ``sum(length[:i])``), because uproot cannot write a list of lists per event;
* ``Hit``: ``tpc, plane, wire, peak_tick, rms, amplitude, integral, start_tick, end_tick`` and the
  truth ``truth`` (0 track, 1 shower, 2 none) and ``michel``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .geometry import Geometry
from .particles import Deposits, beam_halo, beam_particle, cosmic_muons
from .readout import HIT_FIELDS, ReadoutConfig, read_plane


@dataclass(frozen=True)
class Scenario:
    """What one readout window contains.

    Args:
        cosmics (float): mean number of cosmic muons (Poisson). The surface flux gives ~45 in the
            3 ms window plus one drift time (167 Hz/m² over ~50 m² for ~5.3 ms); 70 is used so that a
            full event has ProtoDUNE's ~55k hits (the real detector has more hits per muon: wrapped
            induction wires, noisier channels).
        beam (bool): one beam particle per event.
        beam_momenta (tuple[float, ...]): beam momenta (GeV/c) chosen from uniformly.
        halo (float): mean number of beam-halo muons.
    """

    cosmics: float = 70.0
    beam: bool = True
    beam_momenta: tuple[float, ...] = (1.0, 2.0, 3.0, 6.0, 7.0)
    halo: float = 2.0

    @classmethod
    def preset(cls, scale: str) -> Scenario:
        if scale == "full":
            return cls()
        if scale == "small":
            return replace(cls(), cosmics=3.0, beam_momenta=(1.0, 2.0), halo=0.3)
        raise ValueError(f"unknown scale {scale!r}; use 'full' or 'small'")


@dataclass(frozen=True)
class Simulation:
    """Geometry, event content and readout; :meth:`event` simulates one event."""

    geometry: Geometry = field(default_factory=Geometry)
    scenario: Scenario = field(default_factory=Scenario)
    readout: ReadoutConfig = field(default_factory=ReadoutConfig)

    @classmethod
    def preset(cls, scale: str) -> Simulation:
        """``"full"`` (ProtoDUNE-SP size, ~55k hits) or ``"small"`` (one 1 m³ TPC, a few thousand hits)."""
        return cls(Geometry.preset(scale), Scenario.preset(scale))

    def settings(self) -> dict[str, Any]:
        """The settings as plain data (stored in generated files)."""
        return {part: {k: v for k, v in dataclasses.asdict(getattr(self, part)).items() if not k.startswith("_")}
                for part in ("geometry", "scenario", "readout")}

    def deposits(self, rng: np.random.Generator) -> Deposits:
        """Ionisation of every particle in the readout window."""
        s, geo = self.scenario, self.geometry
        parts = [cosmic_muons(rng, geo, rng.poisson(s.cosmics)), beam_halo(rng, geo, rng.poisson(s.halo))]
        if s.beam:
            parts.append(beam_particle(rng, geo, s.beam_momenta))
        return Deposits.concat(parts)

    def event(self, rng: np.random.Generator) -> dict[str, dict[str, np.ndarray] | np.ndarray]:
        """Simulates one event: the ``Roi``, ``Adc`` and ``Hit`` collections (see the module docstring)."""
        geo = self.geometry
        deposits = self.deposits(rng)
        tpc_of = geo.tpc(deposits.xyz[:, 0], deposits.xyz[:, 2])
        rois: dict[str, list[np.ndarray]] = {k: [] for k in ("tpc", "plane", "wire", "start", "length")}
        hits: dict[str, list[np.ndarray]] = {k: [] for k in ("tpc", "plane", *HIT_FIELDS)}
        adc: list[np.ndarray] = []
        for tpc in range(geo.n_tpc):
            inside = tpc_of == tpc
            subset = Deposits(deposits.xyz[inside], deposits.t[inside], deposits.electrons[inside],
                              deposits.category[inside], deposits.michel[inside])
            for plane in range(geo.n_planes):
                out = read_plane(rng, geo, self.readout, subset, plane)
                n_roi, n_hit = len(out.roi_wire), len(out.hits["wire"])
                rois["tpc"].append(np.full(n_roi, tpc, np.uint8))
                rois["plane"].append(np.full(n_roi, plane, np.uint8))
                rois["wire"].append(out.roi_wire)
                rois["start"].append(out.roi_start)
                rois["length"].append(out.roi_length)
                adc.append(out.adc)
                hits["tpc"].append(np.full(n_hit, tpc, np.uint8))
                hits["plane"].append(np.full(n_hit, plane, np.uint8))
                for name in HIT_FIELDS:
                    hits[name].append(out.hits[name])
        return {"Roi": {k: np.concatenate(v) for k, v in rois.items()},
                "Adc": np.concatenate(adc),
                "Hit": {k: np.concatenate(v) for k, v in hits.items()}}
