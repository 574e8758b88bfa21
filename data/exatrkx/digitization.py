"""Geometric digitization of the ACTS generic detector: pixel/strip pitches → ACTS digitization config.

ACTS's ``DigitizationAlgorithm`` turns Fatras sim hits into clusters of cells (channels with a
deposited path length) and measurements (cluster centres) when every sensitive surface has a
segmentation. The generic detector's modules come in a handful of shapes, so the segmentation is
derived here from each surface's bounds and the pitch of its sub-detector, and written in ACTS's
JSON hierarchy-map format (one entry per volume when all its modules share a shape, else one per
surface). This is what makes the generated hits TrackML-like: positions from clusters, with cell
counts, charges and cluster sizes that encode the incidence angle.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SubDetector:
    """Readout of one kind of module (lengths in mm; threshold in mm of path length per cell)."""

    volumes: tuple[int, ...]
    pitch_x: float
    pitch_y: float
    thickness: float
    threshold: float


#: the generic detector's sub-detectors by name (volume ids are those of ``acts.examples.GenericDetector``)
SUBDETECTORS: dict[str, SubDetector] = {
    "pixel": SubDetector(volumes=(7, 8, 9), pitch_x=0.05, pitch_y=0.05, thickness=0.15, threshold=0.01),
    "short_strip": SubDetector(volumes=(12, 13, 14), pitch_x=0.08, pitch_y=1.2, thickness=0.25, threshold=0.01),
    "long_strip": SubDetector(volumes=(16, 17, 18), pitch_x=0.12, pitch_y=10.8, thickness=0.35, threshold=0.03),
}

#: which sub-detectors each ``--detector`` choice reads out
DETECTORS: dict[str, tuple[str, ...]] = {"pixel": ("pixel",), "full": tuple(SUBDETECTORS)}


def _axis(name: str, low: float, high: float, pitch: float) -> dict[str, Any]:
    bins = max(1, round((high - low) / pitch))
    return {"bins": bins, "min": low, "max": high, "option": "open", "type": "equidistant", "value": name}


def segmentation(bounds_type: str, values: list[float], sub: SubDetector) -> dict[str, Any]:
    """The cell grid of one module from its bounds (rectangle or trapezoid, as in the generic detector)."""
    if bounds_type == "RectangleBounds":
        min_x, min_y, max_x, max_y = values[:4]
    elif bounds_type == "TrapezoidBounds":
        half_x = max(values[0], values[1])
        min_x, max_x, min_y, max_y = -half_x, half_x, -values[2], values[2]
    else:
        raise ValueError(f"no segmentation rule for {bounds_type} modules")
    return {"binningdata": [_axis("AxisX", min_x, max_x, sub.pitch_x), _axis("AxisY", min_y, max_y, sub.pitch_y)]}


def digitization_config(tracking_geometry: Any, detector: str = "pixel") -> dict[str, Any]:
    """ACTS digitization config (as a JSON-ready dict) for the sub-detectors of ``detector``.

    Args:
        tracking_geometry: ``acts.TrackingGeometry`` of the generic detector.
        detector: a key of :data:`DETECTORS`; sim hits on other volumes give no measurements.
    """
    by_volume = {v: SUBDETECTORS[name] for name in DETECTORS[detector] for v in SUBDETECTORS[name].volumes}
    shapes: dict[int, dict[tuple, list[tuple[int, int, int]]]] = defaultdict(lambda: defaultdict(list))

    def visit(surface: Any) -> None:
        gid = surface.geometryId
        if gid.sensitive == 0 or gid.volume not in by_volume:
            return
        bounds = surface.bounds
        shape = (type(bounds).__name__, tuple(float(v) for v in bounds.values()))
        shapes[gid.volume][shape].append((gid.volume, gid.layer, gid.sensitive))

    tracking_geometry.visitSurfaces(visit)
    entries = []
    for volume, by_shape in sorted(shapes.items()):
        sub = by_volume[volume]
        for (bounds_type, values), surfaces in by_shape.items():
            value = {"geometric": {"digital": False, "indices": [0, 1], "thickness": sub.thickness,
                                   "threshold": sub.threshold,
                                   "segmentation": segmentation(bounds_type, list(values), sub)}}
            if len(by_shape) == 1:
                entries.append({"volume": volume, "value": value})
                continue
            entries += [{"volume": v, "layer": layer, "sensitive": s, "value": value} for v, layer, s in surfaces]
    return {"acts-geometry-hierarchy-map": {"format-version": 0, "value-identifier": "digitization-configuration"},
            "entries": entries}


def write_digitization_config(tracking_geometry: Any, path: str | os.PathLike, detector: str = "pixel") -> str:
    """Writes :func:`digitization_config` to ``path`` (ACTS reads it with ``readDigiConfigFromJson``)."""
    with open(path, "w") as stream:
        json.dump(digitization_config(tracking_geometry, detector), stream)
    return os.fspath(path)
