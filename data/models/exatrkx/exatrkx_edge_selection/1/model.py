"""Triton python model exatrkx_edge_selection: the stage function of sonic_hep.modules.exatrkx, run on the server."""

from sonic_hep.framework.inference.backends.python_stage import stage_model
from sonic_hep.modules.exatrkx.ensemble_stages import edge_selection

TritonPythonModel = stage_model(edge_selection)
