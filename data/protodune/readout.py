"""From ionisation deposits to what LArSoft's reconstruction starts from: wire waveforms, regions of
interest (ROIs, zero-suppressed ADC) and hits with truth.

The waveforms modelled are the *deconvolved* signals (LArSoft's ``recob::Wire``): after signal
processing every plane shows unipolar, roughly Gaussian pulses whose area is proportional to the
charge, on top of band-limited noise. That is the input both of the hit finder and of the
EmTrkMichelId patches, so the field response and the deconvolution themselves are not simulated.

Per TPC and plane, all vectorised:

1. **Drift**: each deposit reaches the nearest wire of the plane at tick
   ``trigger + (t + d / v_drift) / 0.5 µs``; its charge is attenuated by the electron lifetime and
   its time spread grows with longitudinal diffusion, ``σ² = σ_response² + 2 D_L t_drift``.
2. **Waveforms**: each deposit adds its Gaussian, integrated over each tick, to a (wire × tick)
   grid (``np.bincount`` on flat indices); the same is done for the shower-like and Michel charge,
   which gives each sample's truth.
3. **Noise**: white Gaussian noise smoothed over ~1 tick (deconvolved noise is band-limited),
   scaled to ``noise_adc`` RMS, on every wire.
4. **ROIs**: samples above ``roi_threshold``, widened by ``roi_pad`` ticks on each side, are kept
   (zero suppression); runs of kept samples on a wire are the ROIs.
5. **Hits**: runs of samples above half the hit threshold, split at local minima (valleys between
   overlapping pulses); a segment whose peak passes ``hit_threshold`` is a hit, with charge-weighted
   peak time and RMS, amplitude and integral. Its truth is *track* or *shower* by which charge
   dominates, *none* when less than half of its integral is true signal (noise hits); *Michel* when
   most of its true charge comes from a Michel electron.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.ndimage import gaussian_filter1d, maximum_filter1d
from scipy.special import ndtr

from .geometry import Geometry
from .particles import SHOWER, Deposits

TRUTH_TRACK, TRUTH_SHOWER, TRUTH_NONE = 0, 1, 2


@dataclass(frozen=True)
class ReadoutConfig:
    """Response, noise and thresholds (ADC are deconvolved ADC counts).

    Args:
        electrons_per_adc (float): ionisation electrons per ADC·tick of pulse area (~40 ADC peak
            for a minimum-ionising track crossing one collection wire).
        response_sigma (float): pulse width without diffusion (ticks).
        diffusion (float): longitudinal diffusion constant (cm²/µs).
        lifetime_us (float): electron lifetime (µs).
        noise_adc (float): noise RMS per sample.
        roi_threshold (float): zero-suppression threshold (ADC).
        roi_pad (int): ticks kept on each side of a sample above the ROI threshold.
        hit_threshold (float): minimum hit amplitude (ADC).
    """

    electrons_per_adc: float = 125.0
    response_sigma: float = 1.8
    diffusion: float = 6.2e-6
    lifetime_us: float = 10000.0
    noise_adc: float = 2.5
    roi_threshold: float = 9.0
    roi_pad: int = 10
    hit_threshold: float = 11.0


@dataclass
class PlaneReadout:
    """ROIs, their samples and the hits of one plane of one TPC (all numpy arrays)."""

    roi_wire: np.ndarray
    roi_start: np.ndarray
    roi_length: np.ndarray
    adc: np.ndarray
    hits: dict[str, np.ndarray]


def waveforms(geo: Geometry, cfg: ReadoutConfig, deposits: Deposits, plane: int,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Noise-free signal grids (wires × ticks, ADC) of one TPC's plane: total, shower-like, Michel."""
    n_wires, n_ticks = geo.wires(plane), geo.ticks
    x, y, z = deposits.xyz.T
    wire = geo.wire(plane, y, z)
    drift_us = geo.drift_distance(x) / geo.drift_velocity
    tick = geo.tick(x, deposits.t)
    charge = deposits.electrons * np.exp(-drift_us / cfg.lifetime_us) / cfg.electrons_per_adc
    cm_per_tick = geo.drift_velocity * geo.tick_us
    sigma = np.sqrt(cfg.response_sigma ** 2 + 2 * cfg.diffusion * drift_us / cm_per_tick ** 2)
    keep = (wire >= 0) & (wire < n_wires) & (tick > -5 * sigma) & (tick < n_ticks + 5 * sigma) \
        & (y >= 0) & (y <= geo.height)
    wire, tick, charge, sigma = wire[keep], tick[keep], charge[keep], sigma[keep]
    shower, michel = deposits.category[keep] == SHOWER, deposits.michel[keep]
    half = int(np.ceil(4 * sigma.max())) if len(sigma) else 0
    offsets = np.arange(-half, half + 1)
    centre = np.rint(tick).astype(np.int64)
    samples = centre[:, None] + offsets  # (deposits, 2·half + 1) ticks
    weights = charge[:, None] * (ndtr((samples + 0.5 - tick[:, None]) / sigma[:, None])
                                 - ndtr((samples - 0.5 - tick[:, None]) / sigma[:, None]))
    valid = (samples >= 0) & (samples < n_ticks)
    flat = (wire[:, None] * n_ticks + samples)[valid]
    grids = []
    for select in (None, shower, michel):
        w = weights if select is None else weights * select[:, None]
        grids.append(np.bincount(flat, w[valid], minlength=n_wires * n_ticks).reshape(n_wires, n_ticks))
    return grids[0], grids[1], grids[2]


def noise(rng: np.random.Generator, shape: tuple[int, int], rms: float) -> np.ndarray:
    """Band-limited Gaussian noise with the given RMS (white noise smoothed over one tick)."""
    white = rng.standard_normal(shape, dtype=np.float32)
    kernel_norm = np.sqrt(np.sum(gaussian_filter1d(np.eye(1, 9, 4)[0], 1.0) ** 2))
    return gaussian_filter1d(white, 1.0, axis=1, mode="wrap") * np.float32(rms / kernel_norm)


def _runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts (flat index into ``mask``, row-major) and lengths of runs of True that stay in a row."""
    rows, cols = mask.shape
    padded = np.zeros((rows, cols + 2), dtype=bool)  # a False guard on each side of every row
    padded[:, 1:-1] = mask
    flat = padded.ravel()
    starts = np.flatnonzero(flat[1:] & ~flat[:-1])      # index of the guard/False before the run
    stops = np.flatnonzero(flat[:-1] & ~flat[1:])       # index of the run's last sample
    wire, start = np.divmod(starts, cols + 2)
    return wire * cols + start, stops - starts


def find_rois(wf: np.ndarray, cfg: ReadoutConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Zero suppression: (wire, start tick, length) of each ROI and the rounded samples, in order."""
    mask = maximum_filter1d((wf > cfg.roi_threshold).view(np.uint8), 2 * cfg.roi_pad + 1, axis=1).view(bool)
    starts, lengths = _runs(mask)
    wire, start = np.divmod(starts, wf.shape[1])
    adc = np.clip(np.rint(wf[mask]), -32768, 32767).astype(np.int16)
    return wire.astype(np.int16), start.astype(np.int16), lengths.astype(np.int16), adc


def find_hits(wf: np.ndarray, total: np.ndarray, shower: np.ndarray, michel: np.ndarray,
              cfg: ReadoutConfig) -> dict[str, np.ndarray]:
    """Hits of one plane (see the module docstring) with their truth."""
    n_wires, n_ticks = wf.shape
    padded = np.full((n_wires, n_ticks + 2), -np.inf, dtype=np.float32)  # guards: runs never cross wires
    padded[:, 1:-1] = wf
    flat = padded.ravel()
    low = 0.5 * cfg.hit_threshold
    idx = np.flatnonzero(flat > low)
    if len(idx) == 0:
        return {name: np.zeros(0, dtype) for name, dtype in HIT_FIELDS.items()}
    v = flat[idx]
    valley = (flat[idx - 1] >= v) & (flat[idx + 1] > v)
    first = np.ones(len(idx), bool)
    first[1:] = (np.diff(idx) != 1) | valley[1:]
    starts = np.flatnonzero(first)
    segment = np.cumsum(first) - 1
    wire, col = np.divmod(idx, n_ticks + 2)
    tick = (col - 1).astype(np.float64)
    rel = tick - tick[starts][segment]
    integral = np.add.reduceat(v.astype(np.float64), starts)
    peak = np.maximum.reduceat(v, starts)
    mean = np.add.reduceat(v * rel, starts) / integral
    var = np.add.reduceat(v * rel * rel, starts) / integral - mean ** 2
    length = np.diff(np.append(starts, len(idx)))
    grid_index = wire * n_ticks + (col - 1)
    true = [np.add.reduceat(g.ravel()[grid_index], starts) for g in (total, shower, michel)]
    keep = peak > cfg.hit_threshold
    true_total, true_shower, true_michel = (t[keep] for t in true)
    integral, first_tick = integral[keep], tick[starts][keep]
    real = true_total > 0.5 * integral
    truth = np.where(~real, TRUTH_NONE, np.where(true_shower > 0.5 * true_total, TRUTH_SHOWER, TRUTH_TRACK))
    return {
        "wire": wire[starts][keep].astype(np.int16),
        "peak_tick": (first_tick + mean[keep]).astype(np.float32),
        "rms": np.sqrt(np.maximum(var[keep], 0.0)).astype(np.float32),
        "amplitude": peak[keep].astype(np.float32),
        "integral": integral.astype(np.float32),
        "start_tick": first_tick.astype(np.int16),
        "end_tick": (first_tick + length[keep] - 1).astype(np.int16),
        "truth": truth.astype(np.int8),
        "michel": (real & (true_michel > 0.5 * true_total)),
    }


HIT_FIELDS = {"wire": np.int16, "peak_tick": np.float32, "rms": np.float32, "amplitude": np.float32,
              "integral": np.float32, "start_tick": np.int16, "end_tick": np.int16, "truth": np.int8,
              "michel": bool}


def read_plane(rng: np.random.Generator, geo: Geometry, cfg: ReadoutConfig, deposits: Deposits,
               plane: int) -> PlaneReadout:
    """Waveforms, noise, ROIs and hits of one plane of the TPC the deposits belong to."""
    total, shower, michel = waveforms(geo, cfg, deposits, plane)
    wf = total.astype(np.float32) + noise(rng, total.shape, cfg.noise_adc)
    roi_wire, roi_start, roi_length, adc = find_rois(wf, cfg)
    hits = find_hits(wf, total, shower, michel, cfg)
    return PlaneReadout(roi_wire, roi_start, roi_length, adc, hits)
