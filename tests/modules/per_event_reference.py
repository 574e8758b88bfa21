"""The common and demo modules as they were written one event at a time (CMSSW's idiom), kept as the
references their columnar versions must equal bit for bit, and the per-event twin of DijetMass.

Renamed (``Ref`` prefix) because module types are registered by class name; otherwise the code is the
per-event modules' own, so a difference in a product is the columnar version's.
"""

from __future__ import annotations

import awkward as ak
import hist
import numpy as np
import vector

from sonic_hep.framework import Analyzer, Filter, InputTag, Output, Param, Producer
from sonic_hep.framework.inference import InferenceProducer

vector.register_awkward()


class RefCollectionSum(Producer):
    src = InputTag("Jet", fields=("pt",))
    min_pt = Param(float, 0.0)
    sum = Output("float: scalar sum of pt (GeV) of the selected objects")
    count = Output("int: number of selected objects")

    def produce(self, event):
        pt = ak.to_numpy(event.get(self.src).pt)
        keep = pt >= self.min_pt
        event.put("sum", float(pt[keep].sum()))
        event.put("count", int(keep.sum()))


class RefMinCountFilter(Filter):
    src = InputTag("Jet", fields=("pt",))
    min_pt = Param(float, 20.0)
    min_count = Param(int, 1)

    def filter(self, event):
        pt = ak.to_numpy(event.get(self.src).pt)
        return int(np.count_nonzero(pt >= self.min_pt)) >= self.min_count


class RefSelectObjects(Producer):
    src = InputTag("Jet", fields=("pt", "eta", "phi", "mass"))
    min_pt = Param(float, 20.0)
    max_abs_eta = Param(float, 2.5)
    objects = Output("collection of the selected objects (same fields as src)")

    def produce(self, event):
        objs = event.get(self.src)
        keep = (objs.pt >= self.min_pt) & (abs(objs.eta) <= self.max_abs_eta)
        event.put("objects", {field: ak.to_numpy(objs[field][keep]) for field in objs.fields})


class RefHistogram1D(Analyzer):
    src = InputTag()
    bins = Param(int, 50)
    low = Param(float, 0.0)
    high = Param(float, 500.0)
    name = Param(str, "h")
    title = Param(str, "")

    def begin_job(self):
        self.hist = hist.Hist.new.Reg(self.bins, self.low, self.high, name="x", label=self.title or self.src).Double()

    def analyze(self, event):
        value = event.get(self.src)
        values = np.ravel(ak.to_numpy(ak.flatten(value, axis=None))) if isinstance(value, ak.Array) else np.ravel(value)
        self.hist.fill(x=values)

    def histograms(self):
        return {self.name: self.hist}


class RefToyJets(Producer):
    mean_jets = Param(float, 6.0)
    features = Param(int, 16)
    jets = Output("float32 array [n jets, features]")

    def produce(self, event):
        rng = event.rng()
        n = int(rng.poisson(self.mean_jets))
        event.put("jets", rng.standard_normal((n, self.features)).astype(np.float32))


class RefToyTagger(InferenceProducer):
    jets = InputTag("toyJets:jets")
    model = Param(str, "demo_mlp")
    labels = Param(list[str], ["b", "c", "uds", "g"])
    scores = Output("per-jet class probabilities: one branch per label")

    def acquire(self, event):
        x = event.get(self.jets)
        if len(x) == 0:
            return {"probs": np.zeros((0, len(self.labels)), np.float32)}
        return self.infer({"x": x}, outputs=["probs"])

    def produce(self, event, result):
        probs = result["probs"]
        event.put("scores", {label: probs[:, i] for i, label in enumerate(self.labels)})


class RefDijetMass(Producer):
    """DijetMass one event at a time, as a CMSSW-minded user writes it with the same ``vector`` idiom."""

    jets = InputTag("Jet", fields=("pt", "eta", "phi", "mass"))
    mass = Output("float: invariant mass of the two leading jets (GeV); NaN with fewer than two jets")

    def produce(self, event):
        jets = event.get(self.jets)
        p4 = ak.zip({"pt": jets.pt, "eta": jets.eta, "phi": jets.phi, "mass": jets.mass}, with_name="Momentum4D")
        event.put("mass", float((p4[0] + p4[1]).mass) if len(p4) >= 2 else float("nan"))
