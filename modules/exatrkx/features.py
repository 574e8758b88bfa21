"""Node features of the Exa.TrkX graph: what every model sees of a hit.

Cylindrical coordinates scaled to O(1) as in Exa.TrkX (r/1000, φ/π, z/1000 with lengths in mm),
cos φ and sin φ so that the models see no discontinuity at φ = ±π, and the cluster shape (cell
count, summed path length, extent along both local axes), which encodes the crossing angle and so
the track's pT and η. The column order is part of the models' interface (:data:`FEATURES`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

#: feature columns, in order (the ONNX models' ``features`` input is [hits, len(FEATURES)])
FEATURES = ("r", "phi", "z", "cos_phi", "sin_phi", "cell_count", "cell_value", "size0", "size1")
#: hit fields the features are built from (the ``Hit`` collection of the generated events)
HIT_FIELDS = ("x", "y", "z", "cell_count", "cell_value", "size0", "size1")
#: column of each feature, for models and algorithms that pick one (e.g. r to orient edges)
COLUMN = {name: i for i, name in enumerate(FEATURES)}


def hit_features(hits: Mapping[str, np.ndarray]) -> np.ndarray:
    """The [hits, len(FEATURES)] float32 feature matrix of one event.

    Args:
        hits: arrays (or an awkward record array) with the fields in :data:`HIT_FIELDS`.
    """
    x = np.asarray(hits["x"], dtype=np.float64)
    y = np.asarray(hits["y"], dtype=np.float64)
    z = np.asarray(hits["z"], dtype=np.float64)
    r = np.hypot(x, y)
    phi = np.arctan2(y, x)
    columns = (r / 1000.0, phi / np.pi, z / 1000.0, np.cos(phi), np.sin(phi),
               np.asarray(hits["cell_count"], dtype=np.float64) / 10.0,
               np.asarray(hits["cell_value"], dtype=np.float64),
               np.asarray(hits["size0"], dtype=np.float64) / 10.0,
               np.asarray(hits["size1"], dtype=np.float64) / 10.0)
    return np.stack(columns, axis=1).astype(np.float32) if len(x) else np.zeros((0, len(FEATURES)), np.float32)
