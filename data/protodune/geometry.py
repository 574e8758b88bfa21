"""A ProtoDUNE-SP-like LArTPC geometry: drift volumes, APAs, three wire planes, drift ticks.

ProtoDUNE-SP is a 7.2 m × 6 m × 7 m liquid-argon TPC: a central cathode, two 3.6 m drift volumes,
and on each side three anode plane assemblies (APAs) of 2.3 m × 6 m, each with two induction
planes (U, V: wires at ±35.7° from the vertical) and one collection plane (Z: vertical wires), about
5 mm apart; the electronics samples every wire at 2 MHz (0.5 µs ticks) for a 3 ms readout.

Coordinates (cm): ``x`` along the drift (cathode at 0, anodes at ±``drift_length``), ``y`` up
(0 to ``height``), ``z`` along the beam (0 to ``n_apa * apa_width``). A TPC is one APA face with
the drift volume in front of it: ``tpc = side * n_apa + apa``, ``side`` 0 for x < 0.

Simplifications, each chosen because the hit classifier does not see it: induction wires do not
wrap around the APA frame (so U/V planes have more, shorter wires than the real 800), and each APA
reads only the drift volume it faces.

Example::

    geo = Geometry.preset("full")
    tpc = geo.tpc(x, z)                  # which APA face collects the charge
    wire = geo.wire(2, y, z)             # collection-plane wire
    tick = geo.tick(x, t_us)             # arrival tick
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

@dataclass(frozen=True)
class Geometry:
    """Detector and readout parameters.

    Args:
        n_apa (int): APAs along z on each side.
        sides (int): drift volumes (2: both sides of the cathode; 1: only x < 0).
        apa_width (float): APA width along z (cm).
        height (float): APA height along y (cm).
        drift_length (float): cathode-to-anode distance (cm).
        pitch (float): wire pitch of every plane (cm).
        angles (tuple[float, float, float]): wire angle from the vertical of U, V, Z (degrees).
        ticks (int): samples per wire in the readout window.
        tick_us (float): sampling period (µs).
        trigger_tick (int): tick of the trigger (t = 0, when the beam particle enters).
        drift_velocity (float): electron drift velocity (cm/µs) at 500 V/cm.
    """

    n_apa: int = 3
    sides: int = 2
    apa_width: float = 230.0
    height: float = 600.0
    drift_length: float = 360.0
    pitch: float = 0.5
    angles: tuple[float, float, float] = (35.7, -35.7, 0.0)
    ticks: int = 6000
    tick_us: float = 0.5
    trigger_tick: int = 500
    drift_velocity: float = 0.16
    _wire_origin: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _wire_count: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        origins, counts = [], []
        for angle in self.angles:
            sin, cos = math.sin(math.radians(angle)), math.cos(math.radians(angle))
            # the wire coordinate s = z' cos - y sin spans [s_min, s_max] over the APA face
            s_min = min(0.0, self.apa_width * cos) + min(0.0, -self.height * sin)
            s_max = max(0.0, self.apa_width * cos) + max(0.0, -self.height * sin)
            origins.append(s_min)
            counts.append(math.ceil((s_max - s_min) / self.pitch - 1e-9))
        object.__setattr__(self, "_wire_origin", tuple(origins))
        object.__setattr__(self, "_wire_count", tuple(counts))

    @classmethod
    def preset(cls, scale: str) -> Geometry:
        """``"full"``: the ProtoDUNE-SP size (6 TPCs, 15.6k wires, 6000 ticks); ``"small"``: one
        1 m³ TPC with 1500 ticks, for tests and quick studies."""
        if scale == "full":
            return cls()
        if scale == "small":
            return replace(cls(), n_apa=1, sides=1, apa_width=100.0, height=100.0, drift_length=100.0,
                           ticks=1500, trigger_tick=100)
        raise ValueError(f"unknown scale {scale!r}; use 'full' or 'small'")

    # -- sizes ------------------------------------------------------------------------------------
    @property
    def n_tpc(self) -> int:
        return self.n_apa * self.sides

    @property
    def n_planes(self) -> int:
        return len(self.angles)

    def wires(self, plane: int) -> int:
        """Number of wires of ``plane`` in one TPC."""
        return self._wire_count[plane]

    @property
    def max_wires(self) -> int:
        return max(self._wire_count)

    @property
    def length(self) -> float:
        """Active length along z (cm)."""
        return self.n_apa * self.apa_width

    @property
    def x_range(self) -> tuple[float, float]:
        return (-self.drift_length, self.drift_length if self.sides == 2 else 0.0)

    @property
    def drift_ticks(self) -> float:
        """Ticks an electron needs to cross the whole drift volume."""
        return self.drift_length / self.drift_velocity / self.tick_us

    # -- projections ------------------------------------------------------------------------------
    def tpc(self, x: np.ndarray, z: np.ndarray) -> np.ndarray:
        """TPC index of each point (``-1`` outside the active volume along z/x)."""
        apa = np.floor(z / self.apa_width).astype(np.int64)
        side = (x >= 0).astype(np.int64)
        inside = (apa >= 0) & (apa < self.n_apa) & (x >= self.x_range[0]) & (x <= self.x_range[1])
        return np.where(inside, side * self.n_apa + apa, -1)

    def wire(self, plane: int, y: np.ndarray, z: np.ndarray) -> np.ndarray:
        """Wire number in ``plane`` (nearest wire; may be out of range near the APA edges).

        The wire coordinate is the distance perpendicular to the wires, ``s = z' cos θ − y sin θ``
        with ``z'`` measured from the APA's upstream edge.
        """
        angle = math.radians(self.angles[plane])
        z_local = np.mod(z, self.apa_width)
        s = z_local * math.cos(angle) - y * math.sin(angle)
        return np.floor((s - self._wire_origin[plane]) / self.pitch).astype(np.int64)

    def drift_distance(self, x: np.ndarray) -> np.ndarray:
        """Distance from each point to the anode it drifts to (cm)."""
        return self.drift_length - np.abs(x)

    def tick(self, x: np.ndarray, t_us: np.ndarray) -> np.ndarray:
        """Arrival tick (fractional) of ionisation made at ``x`` at time ``t_us`` after the trigger."""
        return self.trigger_tick + (t_us + self.drift_distance(x) / self.drift_velocity) / self.tick_us
