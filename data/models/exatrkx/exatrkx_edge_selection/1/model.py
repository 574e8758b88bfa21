"""Triton python model exatrkx_edge_selection: the stage function of sonic_hep.modules.exatrkx, run on the server."""

from sonic_hep.modules.exatrkx.serving import EdgeSelectionModel as TritonPythonModel  # noqa: F401
