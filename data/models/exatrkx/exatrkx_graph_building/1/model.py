"""Triton python model exatrkx_graph_building: the stage function of sonic_hep.modules.exatrkx, run on the server."""

from sonic_hep.framework.inference.backends.python_stage import stage_model
from sonic_hep.modules.exatrkx.ensemble_stages import graph_building

TritonPythonModel = stage_model(graph_building)
