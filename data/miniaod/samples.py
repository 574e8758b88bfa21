"""Training samples in memory and on disk (compact ``.npz``): ParticleNet jets, DeepMET events, DeepTau τs.

Only numpy here, so training can run where the ROOT stack is not installed (e.g. a GPU node): the
samples are built from ROOT files by ``datasets.py`` and saved; ``fitting.py`` loads them.

Storage is ragged and half precision where the values are normalised: a jet stores the rows of its
real constituents only (points and masks are rebuilt: CMS's ``pfcand_etarel``/``phirel`` are feature
rows 2 and 3, un-normalised), a DeepTau grid stores only its occupied cells.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: class labels of the project's models, in output order
AK4_LABELS = ("b", "c", "uds", "g", "pu")
AK8_LABELS = ("Top", "W", "QCD")
TAU_LABELS = ("e", "mu", "tau", "jet")
TAU_GRIDS = {"inner": 11, "outer": 21}
TAU_BLOCKS = {"egamma": 86, "muon": 64, "hadrons": 38}
TAU_GRID_NAMES = tuple(f"input_{g}_{b}" for g in TAU_GRIDS for b in TAU_BLOCKS)


def _offsets(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def _gather(rows: np.ndarray, offsets: np.ndarray, index: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
    """``[B, C, length]`` float32 from ragged rows, and the ``[B, 1, length]`` mask."""
    counts = np.minimum(offsets[index + 1] - offsets[index], length)
    out = np.zeros((index.size, length, rows.shape[1]), dtype=np.float32)
    mask = np.zeros((index.size, 1, length), dtype=np.float32)
    b = np.repeat(np.arange(index.size), counts)
    pos = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    src = np.repeat(offsets[index], counts) + pos
    out[b, pos] = rows[src]
    mask[b, 0, pos] = 1.0
    return np.ascontiguousarray(out.transpose(0, 2, 1)), mask


@dataclass
class JetSample:
    """ParticleNet inputs of many jets (ragged), with class labels and jet pT."""

    pf: np.ndarray  # (constituent rows, pf features), normalised
    pf_offsets: np.ndarray
    sv: np.ndarray  # (sv rows, sv features)
    sv_offsets: np.ndarray
    labels: np.ndarray
    pt: np.ndarray
    min_pf: int = 1  # the model's minimum particle count (ParticleNet's k + 1 neighbours)

    def __len__(self) -> int:
        return self.labels.size

    def batch(self, index: np.ndarray, max_pf: int = 100, max_sv: int = 10) -> list[np.ndarray]:
        """The six inputs (CMS order) of jets ``index``, padded to the batch's longest jet."""
        n_pf = self.pf_offsets[index + 1] - self.pf_offsets[index]
        n_sv = self.sv_offsets[index + 1] - self.sv_offsets[index]
        pf_len = int(np.clip(n_pf.max(), self.min_pf, max_pf))
        sv_len = int(np.clip(n_sv.max(), 1, max_sv))
        pf, pf_mask = _gather(self.pf, self.pf_offsets, index, pf_len)
        sv, sv_mask = _gather(self.sv, self.sv_offsets, index, sv_len)
        return [np.ascontiguousarray(pf[:, 2:4]), pf, pf_mask, np.ascontiguousarray(sv[:, 2:4]), sv, sv_mask]

    def save(self, path: str | Path) -> None:
        np.savez_compressed(path, pf=self.pf.astype(np.float16), pf_offsets=self.pf_offsets,
                            sv=self.sv.astype(np.float16), sv_offsets=self.sv_offsets, labels=self.labels,
                            pt=self.pt, min_pf=self.min_pf)

    @classmethod
    def load(cls, path: str | Path) -> JetSample:
        with np.load(path) as f:
            return cls(f["pf"].astype(np.float32), f["pf_offsets"], f["sv"].astype(np.float32), f["sv_offsets"],
                       f["labels"], f["pt"], int(f["min_pf"]))


@dataclass
class MetSample:
    """DeepMET inputs per event without the zero padding, and the MET targets (px, py) / 50 GeV."""

    cont: np.ndarray  # (rows, 8)
    cats: np.ndarray  # (rows, 3)
    offsets: np.ndarray  # (events + 1)
    target: np.ndarray  # (events, 2): generator MET
    pf_met: np.ndarray  # (events, 2): raw PF MET, for comparison
    puppi_met: np.ndarray  # (events, 2)

    def __len__(self) -> int:
        return self.target.shape[0]

    def batch(self, index: np.ndarray, length: int | None = None) -> list[np.ndarray]:
        """``[B, L, 8]`` and three ``[B, L, 1]`` arrays (L: the batch's longest event, or ``length``)."""
        counts = self.offsets[index + 1] - self.offsets[index]
        length = int(length or max(int(counts.max()), 1))
        cont, _ = _gather(self.cont, self.offsets, index, length)
        cats, _ = _gather(self.cats, self.offsets, index, length)
        cont, cats = cont.transpose(0, 2, 1), cats.transpose(0, 2, 1)
        return [np.ascontiguousarray(cont)] + [np.ascontiguousarray(cats[:, :, i:i + 1]) for i in range(3)]

    def save(self, path: str | Path) -> None:
        """Half precision for the continuous inputs, bytes for the categories (a few % of a float32 file)."""
        np.savez_compressed(path, cont=self.cont.astype(np.float16), cats=self.cats.astype(np.uint8),
                            offsets=self.offsets, target=self.target, pf_met=self.pf_met, puppi_met=self.puppi_met)

    @classmethod
    def load(cls, path: str | Path) -> MetSample:
        with np.load(path) as f:
            return cls(f["cont"].astype(np.float32), f["cats"].astype(np.float32), f["offsets"], f["target"],
                       f["pf_met"], f["puppi_met"])

    def take(self, index: np.ndarray) -> MetSample:
        """The events ``index``."""
        counts = self.offsets[index + 1] - self.offsets[index]
        rows = np.repeat(self.offsets[index], counts) + np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts,
                                                                                          counts)
        return MetSample(self.cont[rows], self.cats[rows], np.concatenate([[0], np.cumsum(counts)]), self.target[index],
                         self.pf_met[index], self.puppi_met[index])

    @classmethod
    def concatenate(cls, parts: list[MetSample]) -> MetSample:
        """One sample from several (e.g. prepared in pieces)."""
        counts = np.concatenate([np.diff(p.offsets) for p in parts])
        return cls(np.concatenate([p.cont for p in parts]), np.concatenate([p.cats for p in parts]),
                   np.concatenate([[0], np.cumsum(counts)]), np.concatenate([p.target for p in parts]),
                   np.concatenate([p.pf_met for p in parts]), np.concatenate([p.puppi_met for p in parts]))


@dataclass
class TauSample:
    """DeepTau inputs of many τs; each grid keeps only its occupied cells."""

    tau: np.ndarray  # (taus, 43)
    labels: np.ndarray
    pt: np.ndarray
    cells: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    # grid name → (τ index, η index, φ index, channel values)

    def __len__(self) -> int:
        return self.labels.size

    def batch(self, index: np.ndarray) -> list[np.ndarray]:
        """The seven dense inputs (CMS order) of τs ``index``."""
        out = [self.tau[index]]
        position = np.full(self.tau.shape[0], -1)
        position[index] = np.arange(index.size)
        for name in TAU_GRID_NAMES:
            t, ie, ip, values = self.cells[name]
            size = TAU_GRIDS[name.split("_")[1]]
            dense = np.zeros((index.size, size, size, values.shape[1]), dtype=np.float32)
            rows = position[t] >= 0
            dense[position[t[rows]], ie[rows], ip[rows]] = values[rows]
            out.append(dense)
        return out

    def save(self, path: str | Path) -> None:
        arrays = {"tau": self.tau, "labels": self.labels, "pt": self.pt}
        for name, (t, ie, ip, values) in self.cells.items():
            arrays.update({f"{name}.t": t.astype(np.int32), f"{name}.ie": ie.astype(np.int8),
                           f"{name}.ip": ip.astype(np.int8), f"{name}.values": values.astype(np.float32)})
        np.savez_compressed(path, **arrays)

    @classmethod
    def load(cls, path: str | Path) -> TauSample:
        with np.load(path) as f:
            cells = {name: (f[f"{name}.t"].astype(np.int64), f[f"{name}.ie"].astype(np.int64),
                            f[f"{name}.ip"].astype(np.int64), f[f"{name}.values"]) for name in TAU_GRID_NAMES}
            return cls(f["tau"], f["labels"], f["pt"], cells)
