"""DeepMET: missing transverse momentum regressed from all PF candidates of the event.

Inputs exactly as CMS's ``DeepMETSonicProducer`` builds them, one event per request: a ``[4500, 8]``
continuous block (dxy, dz, η, mass, pT/50, PUPPI weight, px/50, py/50) and three ``[4500, 1]``
categorical blocks (charge, pdgId and fromPV as embedding indices), candidates in collection order,
zero-padded (and truncated at 4500). The model's two outputs times 50 are the MET (px, py).
Input names may carry a ``:0`` suffix (CMS's converted TensorFlow model); they are matched by their
base name, so the project's model and CMS's ``deepmet`` are interchangeable.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future

import numpy as np

from ...framework import InputTag, Output, Param
from ...framework.errors import ConfigError
from ...framework.inference import InferenceProducer
from .columns import columns

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


def deepmet_inputs(pf: Mapping[str, np.ndarray], max_candidates: int = 4500,
                   norm: float = 50.0) -> dict[str, np.ndarray]:
    """The four DeepMET inputs ``[1, max_candidates, 8|1]`` (float32) of one event."""
    n = min(len(pf["pt"]), max_candidates)
    pt, phi = pf["pt"][:n].astype(np.float64), pf["phi"][:n]
    scale = 1.0 / norm
    cont = np.zeros((1, max_candidates, 8), dtype=np.float32)
    cont[0, :n] = np.stack([pf["dxy"][:n], pf["dz"][:n], pf["eta"][:n], pf["mass"][:n],
                            scale_and_rm_outlier(pt, scale), pf["puppiWeight"][:n],
                            scale_and_rm_outlier(pt * np.cos(phi), scale),
                            scale_and_rm_outlier(pt * np.sin(phi), scale)], axis=1)
    cats = [np.zeros((1, max_candidates, 1), dtype=np.float32) for _ in range(3)]
    charge = np.rint(pf["charge"][:n]).astype(np.int64)
    cats[0][0, :n, 0] = np.clip(charge, -1, 1) + 1
    cats[1][0, :n, 0] = categories(pf["pdgId"][:n].astype(np.int64), _PDG_KEYS, _PDG_VALUES, "pdgId")
    cats[2][0, :n, 0] = pf["fromPV"][:n]
    return {"input": cont, "input_cat0": cats[0], "input_cat1": cats[1], "input_cat2": cats[2]}


class DeepMETProducer(InferenceProducer):
    """DeepMET (CMS inputs, one request per event). Products: ``met`` — pt, phi, px, py (GeV)."""

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

    def acquire(self, event) -> Future:
        inputs = deepmet_inputs(columns(event.get(self.pfcands), FIELDS), self.max_candidates, self.norm_factor)
        return self.infer({self._names[k]: v for k, v in inputs.items()}, [self._output])

    def produce(self, event, result) -> None:
        px, py = (float(v) * self.norm_factor for v in result[self._output][0, :2])
        event.put("met", {"pt": float(np.hypot(px, py)), "phi": float(np.arctan2(py, px)), "px": px, "py": py})
