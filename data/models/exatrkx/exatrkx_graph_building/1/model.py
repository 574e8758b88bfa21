"""Triton python model exatrkx_graph_building: the stage function of sonic_hep.modules.exatrkx, run on the server."""

from sonic_hep.modules.exatrkx.serving import GraphBuildingModel as TritonPythonModel  # noqa: F401
