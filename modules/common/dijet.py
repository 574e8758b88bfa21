"""The invariant mass of the two leading jets, written as coffea users write it: ``vector``'s awkward
behaviours over all events of a batch at once.

The shipped columnar example of ``docs/modules.md``: jets zipped as ``Momentum4D`` records (pt, eta, phi,
mass), the pair summed as four-vectors with ``jets[:, 0] + jets[:, 1]`` and its ``.mass`` read off.
"""

from __future__ import annotations

from typing import Any

import awkward as ak
import numpy as np

from ...framework import InputTag, Output, Producer

def momenta(jets: Any) -> ak.Array:
    """A collection's objects as ``Momentum4D`` four-vectors (one list per event)."""
    import vector  # here, not at the top: its 0.2 s import is paid only by jobs that use it

    vector.register_awkward()  # Momentum4D records get +, .mass, .pt ... (idempotent)
    return ak.zip({"pt": jets.pt, "eta": jets.eta, "phi": jets.phi, "mass": jets.mass}, with_name="Momentum4D")


class DijetMass(Producer):
    """Invariant mass of the first two jets of the collection (NanoAOD orders them by decreasing pt).

    Events with fewer than two jets get NaN: the product keeps one entry per event, and NaN is what a
    histogram or a cut ``mjj > x`` leaves out by itself.
    """

    columnar = True
    jets = InputTag("Jet", fields=("pt", "eta", "phi", "mass"), doc="jets, leading first")
    mass = Output("float: invariant mass of the two leading jets (GeV); NaN with fewer than two jets")

    def produce(self, events):
        jets = momenta(events.get(self.jets))
        two = ak.to_numpy(ak.num(jets) >= 2)
        pairs = jets[two]
        mjj = np.full(len(events), np.nan)
        mjj[two] = ak.to_numpy((pairs[:, 0] + pairs[:, 1]).mass)
        events.put("mass", mjj)
