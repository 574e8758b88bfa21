"""Track parameters of the candidates, estimated from their hits: pT from a circle fit, η from a line fit.

Per candidate, in the transverse plane a circle ``x² + y² + D x + E y + F = 0`` is fitted by linear
least squares (Kåsa's method; hits centred on their mean for conditioning), giving the radius of
curvature R and ``pT = 0.3 · B · R`` (GeV, tesla, metres). In the r–z plane a straight line gives
cot θ and so η. The sums the fits need are accumulated for all candidates at once with
``np.bincount``; the 3×3 systems are solved together. Good enough to tell a 1 GeV track from a
0.5 GeV one, which is what the fake-rate definition (candidates with pT > 1 GeV) needs.
"""

from __future__ import annotations

import numpy as np

#: the generic detector's solenoid field in tesla (the simulation's)
B_FIELD_T = 2.0


def _sums(labels: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(labels, values, minlength=n)


def track_parameters(x: np.ndarray, y: np.ndarray, z: np.ndarray, labels: np.ndarray,
                     b_field: float = B_FIELD_T) -> dict[str, np.ndarray]:
    """Per-candidate nhits, pt [GeV], eta and phi (azimuth of the innermost hit).

    Args:
        x, y, z: hit positions in mm.
        labels: candidate of each hit (``-1``: none), candidates numbered 0..T-1.
        b_field: solenoid field in tesla.

    Returns:
        dict of equal-length arrays over the T candidates (empty when there is none).
    """
    on = labels >= 0
    lab = labels[on]
    n = int(lab.max()) + 1 if len(lab) else 0
    if n == 0:
        return {"nhits": np.zeros(0, np.int32), "pt": np.zeros(0, np.float32), "eta": np.zeros(0, np.float32),
                "phi": np.zeros(0, np.float32)}
    x, y, z = (np.asarray(a, dtype=np.float64)[on] for a in (x, y, z))
    count = np.bincount(lab, minlength=n).astype(np.float64)
    # transverse plane: centre the hits of each candidate, then fit the circle
    u = x - _sums(lab, x, n)[lab] / count[lab]
    v = y - _sums(lab, y, n)[lab] / count[lab]
    w = u * u + v * v
    suu, svv, suv = _sums(lab, u * u, n), _sums(lab, v * v, n), _sums(lab, u * v, n)
    su, sv = _sums(lab, u, n), _sums(lab, v, n)
    matrix = np.stack([np.stack([suu, suv, su], -1), np.stack([suv, svv, sv], -1), np.stack([su, sv, count], -1)], 1)
    rhs = -np.stack([_sums(lab, u * w, n), _sums(lab, v * w, n), _sums(lab, w, n)], -1)
    solution = np.einsum("nij,nj->ni", np.linalg.pinv(matrix), rhs)
    d, e, f = solution[:, 0], solution[:, 1], solution[:, 2]
    radius_mm = np.sqrt(np.maximum(d * d / 4 + e * e / 4 - f, 0.0))
    pt = 0.3 * b_field * radius_mm / 1000.0
    # r-z plane: z = z0 + cot(theta) * r
    r = np.hypot(x, y)
    sr, sz, srr, srz = _sums(lab, r, n), _sums(lab, z, n), _sums(lab, r * r, n), _sums(lab, r * z, n)
    denominator = count * srr - sr * sr
    cot_theta = np.divide(count * srz - sr * sz, denominator, out=np.zeros(n), where=np.abs(denominator) > 1e-9)
    # innermost hit: the hit of smallest r per candidate
    order = np.lexsort((r, lab))
    first = order[np.concatenate([[0], np.cumsum(np.bincount(lab, minlength=n))[:-1]])]
    return {"nhits": count.astype(np.int32), "pt": pt.astype(np.float32),
            "eta": np.arcsinh(cot_theta).astype(np.float32), "phi": np.arctan2(y[first], x[first]).astype(np.float32)}
