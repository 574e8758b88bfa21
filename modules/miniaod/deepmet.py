"""DeepMET: missing transverse momentum regressed from all PF candidates of the event.

Inputs exactly as CMS's ``DeepMETSonicProducer`` builds them, one row per event: a ``[4500, 8]``
continuous block (dxy, dz, η, mass, pT/50, PUPPI weight, px/50, py/50) and three ``[4500, 1]``
categorical blocks (charge, pdgId and fromPV as embedding indices), candidates in collection order,
zero-padded (and truncated at 4500). The model's two outputs times 50 are the MET (px, py).
Input names may carry a ``:0`` suffix (CMS's converted TensorFlow model); they are matched by their
base name, so the project's model and CMS's ``deepmet`` are interchangeable.

The producer is columnar: one request carries every event of a batch (rows = events; the inference client
splits it at the model's max_batch_size), built with a few numpy calls over the batch's flattened candidates.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future

import awkward as ak
import numpy as np

from ...framework import ConfigError, EventBatch, InputTag, Output, Param
from ...framework.inference import InferenceProducer
from .columns import Flat, flat_columns

FIELDS = ("pt", "eta", "phi", "mass", "charge", "pdgId", "dxy", "dz", "puppiWeight", "fromPV")
#: CMS's embeddings (DeepMETHelp.h): pdgId → category index (charge c is category c + 1, see below)
PDGID_CATEGORIES = {-211: 0, -13: 1, -11: 2, 0: 3, 1: 4, 2: 5, 11: 6, 13: 7, 22: 8, 130: 9, 211: 10}
INPUTS = ("input", "input_cat0", "input_cat1", "input_cat2")


def _lookup(table: Mapping[int, int]) -> tuple[np.ndarray, np.ndarray]:
    keys = np.array(sorted(table))
    return keys, np.array([table[k] for k in keys])


_PDG_KEYS, _PDG_VALUES = _lookup(PDGID_CATEGORIES)


def categories(values: np.ndarray, keys: np.ndarray, codes: np.ndarray, what: str) -> np.ndarray:
    """Embedding indices of ``values``; a value CMS's table does not know raises ValueError."""
    pos = np.clip(np.searchsorted(keys, values), 0, keys.size - 1)
    bad = keys[pos] != values
    if bad.any():
        raise ValueError(f"{what} {sorted(set(values[bad].tolist()))} not in DeepMET's embedding table {keys.tolist()}")
    return codes[pos]


def scale_and_rm_outlier(values: np.ndarray, scale: float) -> np.ndarray:
    out = values * scale
    return np.where(np.isfinite(out) & (np.abs(out) <= 1e6), out, 0.0)


def _kept_rows(pf: Flat, max_candidates: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Each kept candidate's event and slot in the event's input (its position in the collection), and the
    mask of kept candidates (``None``: all kept) — CMS truncates each event at ``max_candidates``."""
    slot = np.arange(pf.counts.sum()) - np.repeat(pf.offsets[:-1], pf.counts)
    if pf.counts.size == 0 or pf.counts.max(initial=0) <= max_candidates:
        return pf.event, slot, None
    keep = slot < max_candidates
    return pf.event[keep], slot[keep], keep


def _continuous(c: Mapping[str, np.ndarray], scale: float) -> np.ndarray:
    """``[candidates, 8]`` float32: dxy, dz, η, mass, pT, PUPPI weight, px, py (momenta times ``scale``).

    Each column is rounded to float32 as it is written: the same single rounding as stacking them in
    float64 first, without a float64 copy of the batch (which costs more in memory traffic than the math)."""
    pt, phi = c["pt"].astype(np.float64), c["phi"]
    out = np.empty((len(pt), 8), dtype=np.float32)
    for j, name in enumerate(("dxy", "dz", "eta", "mass")):
        out[:, j] = c[name]
    out[:, 4] = scale_and_rm_outlier(pt, scale)
    out[:, 5] = c["puppiWeight"]
    out[:, 6] = scale_and_rm_outlier(pt * np.cos(phi), scale)
    out[:, 7] = scale_and_rm_outlier(pt * np.sin(phi), scale)
    return out


def batch_deepmet_inputs(pf: Flat, max_candidates: int = 4500, norm: float = 50.0) -> dict[str, np.ndarray]:
    """The four DeepMET inputs ``[events, max_candidates, 8|1]`` (float32) of a batch: one row per event,
    its candidates in collection order, zero-padded and truncated at ``max_candidates``.

    Every value is computed per candidate, so an event's row is bit-identical whatever batch it is in."""
    n_events = pf.counts.size
    event, slot, keep = _kept_rows(pf, max_candidates)
    c = pf.columns if keep is None else {name: pf.columns[name][keep] for name in FIELDS}
    cont = np.zeros((n_events, max_candidates, 8), dtype=np.float32)
    cont[event, slot] = _continuous(c, 1.0 / norm)
    cats = [np.zeros((n_events, max_candidates, 1), dtype=np.float32) for _ in range(3)]
    charge = np.rint(c["charge"]).astype(np.int64)
    cats[0][event, slot, 0] = np.clip(charge, -1, 1) + 1
    cats[1][event, slot, 0] = categories(c["pdgId"].astype(np.int64), _PDG_KEYS, _PDG_VALUES, "pdgId")
    cats[2][event, slot, 0] = c["fromPV"]
    return {"input": cont, "input_cat0": cats[0], "input_cat1": cats[1], "input_cat2": cats[2]}


def deepmet_inputs(pf: Mapping[str, np.ndarray], max_candidates: int = 4500,
                   norm: float = 50.0) -> dict[str, np.ndarray]:
    """The four DeepMET inputs ``[1, max_candidates, 8|1]`` (float32) of one event: the batch build on a
    batch of one (for training-set builders and tests that work event by event)."""
    return batch_deepmet_inputs(Flat(dict(pf), np.array([len(pf["pt"])], dtype=np.int64)), max_candidates, norm)


def met_from_outputs(outputs: np.ndarray, norm: float) -> ak.Array:
    """``met`` of each event from the model's ``[events, 2+]`` outputs: a record of float64 pt, phi, px, py per
    event, the layout the per-event product (a dict of Python floats) was written with."""
    px, py = (np.ascontiguousarray(outputs[:, i], dtype=np.float64) * norm for i in range(2))
    return ak.zip({"pt": np.hypot(px, py), "phi": np.arctan2(py, px), "px": px, "py": py}, depth_limit=1)


class DeepMETProducer(InferenceProducer):
    """DeepMET (CMS inputs; columnar: all events of a batch in one request, one row per event). Products:
    ``met`` — pt, phi, px, py (GeV)."""

    columnar = True
    #: the event's inputs (4500 × 11 float32) and the build's per-candidate temporaries
    memory_per_event_mb = 0.5
    pfcands = InputTag("PFCands", fields=FIELDS, doc="PF candidates (MiniAOD packedPFCandidates)")
    model = Param(str, "miniaod_deepmet", doc="model name in the repository (CMS: deepmet)")
    norm_factor = Param(float, 50.0, doc="momentum scale of the inputs and outputs (CMS: 50 GeV)")
    max_candidates = Param(int, 4500, doc="candidates per event in the model's input (CMS: 4500)")
    met = Output("per event: DeepMET pt, phi, px, py in GeV")

    def begin_job(self) -> None:
        info = self.model_info()
        names = {spec.name.split(":", 1)[0]: spec for spec in info.inputs}
        if sorted(names) != sorted(INPUTS) or len(info.outputs) != 1:
            raise ConfigError(f"model {self.model!r} has inputs {[s.name for s in info.inputs]} and outputs "
                              f"{[s.name for s in info.outputs]}; DeepMET needs {list(INPUTS)} and one output (px, py)",
                              key=f"modules.{self.label}.model")
        length = names["input"].dims[0]
        if length not in (-1, self.max_candidates):
            raise ConfigError(f"model {self.model!r} takes {length} candidates, max_candidates is "
                              f"{self.max_candidates}", key=f"modules.{self.label}.max_candidates")
        self._names = {base: spec.name for base, spec in names.items()}
        self._output = info.outputs[0].name

    def acquire(self, events: EventBatch) -> Future:
        pf = flat_columns(events.get(self.pfcands), FIELDS, len(events))
        inputs = batch_deepmet_inputs(pf, self.max_candidates, self.norm_factor)
        return self.infer({self._names[k]: v for k, v in inputs.items()}, [self._output])

    def produce(self, events: EventBatch, result: Mapping[str, np.ndarray]) -> None:
        events.put("met", met_from_outputs(np.asarray(result[self._output]), self.norm_factor))
