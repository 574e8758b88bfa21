"""Inputs for the columnar modules' tests: the CMS NanoAOD beside the checkout and generated collections
busy enough to reach numpy's pairwise summation blocks (more than 128 objects in an event)."""

from __future__ import annotations

from typing import Any

import awkward as ak
import numpy as np
import pytest
import uproot

from tests.conftest import shared_path

JET_FIELDS = ("pt", "eta", "phi", "mass")


def nanoaod_path() -> str:
    """The CMS Open Data NanoAOD (scikit-hep-testdata's ``nanoAOD_2015_CMS_Open_Data_ttbar.root``)."""
    return str(shared_path("real", "root", "nanoAOD_2015_CMS_Open_Data_ttbar.root"))


def nanoaod_columns() -> dict[str, Any]:
    """Its jets as one collection of records, plus a jagged and a scalar branch, as the source gives them."""
    arrays = uproot.open(nanoaod_path())["Events"].arrays([f"Jet_{f}" for f in JET_FIELDS] + ["MET_pt"])
    return {"Jet": ak.zip({f: arrays[f"Jet_{f}"] for f in JET_FIELDS}), "Jet_pt": arrays["Jet_pt"],
            "MET_pt": ak.to_numpy(arrays["MET_pt"])}


def busy_columns(dtype: type, n: int = 120, seed: int = 3) -> dict[str, Any]:
    """Generated events from empty to ~300 objects (numpy sums those in blocks), in ``dtype``."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(rng.choice([0.5, 4.0, 40.0, 200.0], n))
    total = int(counts.sum())
    fields = {"pt": rng.exponential(30.0, total) + 5.0, "eta": rng.uniform(-4, 4, total),
              "phi": rng.uniform(-np.pi, np.pi, total), "mass": rng.uniform(0, 20, total)}
    jets = ak.zip({f: ak.unflatten(v.astype(dtype), counts) for f, v in fields.items()})
    return {"Jet": jets, "Jet_pt": jets.pt, "MET_pt": rng.exponential(30.0, n).astype(dtype)}


@pytest.fixture(params=["nanoaod", "busy-float32", "busy-float64"])
def columns(request) -> dict[str, Any]:
    """The same module inputs from a real file and from generated float32 and float64 collections."""
    if request.param == "nanoaod":
        return nanoaod_columns()
    return busy_columns(np.float32 if request.param.endswith("32") else np.float64)
