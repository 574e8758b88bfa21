"""Hard-scatter events from Pythia 8 (PyPI ``pythia8mc``), as flat numpy arrays over a batch of events.

Each process is one configured ``Pythia`` instance. Pythia's Python binding has no array interface,
so the event record is read particle by particle (about 10 ms for a ttbar event, as long as
generating it); everything after that — truth analysis, detector response, clustering — works on
the flat arrays of the whole batch at once.

Decays: particles with cτ > 10 mm (K0S, Λ, ...) are left stable, as a detector sees them at the
first layers; B and D hadrons and τ leptons decay inside Pythia, at displaced vertices, which is
what secondary vertices and impact parameters are made of.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...framework.errors import SonicError
from ...framework.extras import require

#: Pythia settings per process (13 TeV pp). Names are what ``--process`` accepts.
PROCESSES: dict[str, tuple[str, ...]] = {
    "ttbar": ("Top:gg2ttbar = on", "Top:qqbar2ttbar = on"),
    "qcd": ("HardQCD:all = on", "PhaseSpace:pTHatMin = 30."),
    "ztautau": ("WeakSingleBoson:ffbar2gmZ = on", "WeakZ0:gmZmode = 2", "23:onMode = off", "23:onIfAny = 15",
                "PhaseSpace:mHatMin = 50."),
    "wjets": ("WeakBosonAndParton:qqbar2Wg = on", "WeakBosonAndParton:qg2Wq = on", "PhaseSpace:pTHatMin = 20.",
              "24:onMode = off", "24:onIfAny = 11 13 15"),
}
#: numeric codes stored in the ``genProcess`` branch
PROCESS_CODES = {name: code for code, name in enumerate(PROCESSES)}

COMMON = ("Beams:eCM = 13000.", "Print:quiet = on", "Next:numberCount = 0", "ParticleDecays:limitTau0 = on",
          "ParticleDecays:tau0Max = 10.", "Random:setSeed = on")


class GeneratorError(SonicError):
    """Pythia cannot be set up or fails to produce events."""


@dataclass
class GenBatch:
    """The full Pythia event records of a batch of events, concatenated.

    Indices (``mother1``, ``daughter1``, ``daughter2``) are global positions in the flat arrays, or
    -1 for none. Lengths are GeV, mm → cm (CMS units): ``x, y, z`` are production vertices in cm,
    relative to the event's hard-scatter vertex.
    """

    counts: np.ndarray  # particles per event
    pid: np.ndarray
    status: np.ndarray
    mother1: np.ndarray
    daughter1: np.ndarray
    daughter2: np.ndarray
    px: np.ndarray
    py: np.ndarray
    pz: np.ndarray
    e: np.ndarray
    x: np.ndarray
    y: np.ndarray
    z: np.ndarray
    charge: np.ndarray
    process: np.ndarray  # per event: PROCESS_CODES value

    @property
    def event(self) -> np.ndarray:
        """The event (0..n-1 in the batch) of each particle."""
        return np.repeat(np.arange(len(self.counts)), self.counts)

    @property
    def final(self) -> np.ndarray:
        return self.status > 0


def make_pythia(process: str, seed: int, pthat_min: float | None = None):
    """A ready ``pythia8mc.Pythia`` for ``process`` with a reproducible seed (1 ≤ seed < 900 000 000);
    ``pthat_min`` (GeV) overrides the process's minimum transverse momentum of the hard scattering."""
    pythia8mc = require("pythia8mc", "the MiniAOD generator", GeneratorError)
    if process not in PROCESSES:
        raise GeneratorError(f"unknown process {process!r}; choose from {sorted(PROCESSES)}")
    pythia = pythia8mc.Pythia("", False)
    extra = (f"PhaseSpace:pTHatMin = {pthat_min}",) if pthat_min is not None else ()
    for setting in (*COMMON, f"Random:seed = {seed % 900_000_000 or 1}", *PROCESSES[process], *extra):
        if not pythia.readString(setting):
            raise GeneratorError(f"Pythia rejected the setting {setting!r} for process {process!r}")
    if not pythia.init():
        raise GeneratorError(f"Pythia initialisation failed for process {process!r}")
    return pythia


_FIELDS = ("id", "status", "mother1", "daughter1", "daughter2", "px", "py", "pz", "e", "xProd", "yProd", "zProd")


def read_record(pythia) -> np.ndarray:
    """The current event record as a (n, 12) float64 array (one Python call per particle property)."""
    return np.array([(p.id(), p.status(), p.mother1(), p.daughter1(), p.daughter2(), p.px(), p.py(), p.pz(),
                      p.e(), p.xProd(), p.yProd(), p.zProd()) for p in pythia.event.particles()], dtype=np.float64)


class PythiaGenerator:
    """Generates batches of events of one or several processes (round-robin, reproducible).

    Args:
        processes (list[str]): process names (``PROCESSES``); events cycle through them.
        seed (int): base seed; each process gets its own stream derived from it.
        pthat_min (float | None): minimum hard-scattering pT for every process (e.g. boosted tops).
    """

    def __init__(self, processes: list[str], seed: int, pthat_min: float | None = None):
        self.processes = list(processes)
        self._pythia = {name: make_pythia(name, seed * 7919 + 104_729 * (i + 1), pthat_min)
                        for i, name in enumerate(processes)}
        self._charge_cache: dict[int, float] = {}
        self._next = 0

    def _charges(self, ids: np.ndarray) -> np.ndarray:
        data = next(iter(self._pythia.values())).particleData
        unique = np.unique(ids)
        for pid in unique:
            key = int(pid)
            if key not in self._charge_cache:
                self._charge_cache[key] = float(data.charge(key))
        table = np.array([self._charge_cache[int(p)] for p in unique])
        return table[np.searchsorted(unique, ids)]

    def batch(self, n: int) -> GenBatch:
        """The next ``n`` events."""
        records, process = [], np.empty(n, dtype=np.int32)
        for i in range(n):
            name = self.processes[self._next % len(self.processes)]
            self._next += 1
            pythia = self._pythia[name]
            for _ in range(10):
                if pythia.next():
                    break
            else:
                raise GeneratorError(f"Pythia failed 10 times in a row to generate a {name!r} event")
            records.append(read_record(pythia))
            process[i] = PROCESS_CODES[name]
        counts = np.array([len(r) for r in records], dtype=np.int64)
        flat = np.concatenate(records)
        offsets = np.repeat(np.cumsum(counts) - counts, counts)

        def index(column: int) -> np.ndarray:
            local = flat[:, column].astype(np.int64)
            return np.where(local > 0, local + offsets, -1)  # entry 0 is the "system" line: no mother

        pid = flat[:, 0].astype(np.int64)
        return GenBatch(counts=counts, pid=pid, status=flat[:, 1].astype(np.int64), mother1=index(2),
                        daughter1=index(3), daughter2=index(4), px=flat[:, 5], py=flat[:, 6], pz=flat[:, 7],
                        e=flat[:, 8], x=flat[:, 9] / 10.0, y=flat[:, 10] / 10.0, z=flat[:, 11] / 10.0,
                        charge=self._charges(pid), process=process)
