"""HitPatches: the preprocessing step of EmTrkMichelId, one uint8 48×48 patch per hit."""

from __future__ import annotations

import numpy as np

from ...framework import InputTag, Output, Param, Producer
from .patches import PatchSpec, make_patches


def columns(collection, names: tuple[str, ...]) -> list[np.ndarray]:
    """numpy views of an event's collection fields (awkward records → flat arrays, no copy)."""
    return [np.asarray(collection[name]) for name in names]


class HitPatches(Producer):
    """Cuts a patch (wires × drift pixels) of the zero-suppressed waveforms around every hit.

    Reads the ``Roi``/``Adc`` zero-suppressed waveforms and the ``Hit`` collection written by
    ``sonic data generate protodune`` (the layout of LArSoft's ``recob::Wire`` ROIs and
    ``recob::Hit``). Vectorised over all hits of the event; see ``patches.py``.
    """

    hits = InputTag("Hit", fields=("tpc", "plane", "wire", "peak_tick"), doc="hits (peak tick in ticks)")
    rois = InputTag("Roi", fields=("tpc", "plane", "wire", "start", "length"), doc="zero-suppressed ROIs")
    adc = InputTag("Adc", doc="the ROIs' int16 samples, concatenated in ROI order")
    size = Param(int, 48, doc="patch side in wires and drift pixels (the model's input size)", min=1)
    drift_window = Param(int, 6, doc="ticks averaged into one drift pixel (≈ the wire pitch)", min=1)
    adc_max = Param(float, 120.0, doc="ADC mapped to the top uint8 code (the value the model was trained with)",
                    above=0)
    planes = Param(int, 3, doc="wire planes per TPC (views are numbered tpc * planes + plane)", min=1)

    patches = Output("uint8 [n_hits, size, size, 1]: patch codes, code/255 = clip(mean ADC, 0, adc_max)/adc_max")

    def begin_job(self) -> None:
        self.spec = PatchSpec(self.size, self.drift_window, self.adc_max, self.planes)

    def produce(self, event) -> None:
        rois = event.get(self.rois)
        hits = event.get(self.hits)
        adc = np.asarray(event.get(self.adc))
        patches = make_patches(self.spec, *columns(rois, ("tpc", "plane", "wire", "start", "length")), adc,
                               *columns(hits, ("tpc", "plane", "wire", "peak_tick")))
        event.put("patches", patches)
