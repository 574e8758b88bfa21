"""Triton python model exatrkx_labeling: the stage function of sonic_hep.modules.exatrkx, run on the server."""

from sonic_hep.framework.inference.backends.python_stage import stage_model
from sonic_hep.modules.exatrkx.ensemble_stages import labeling

TritonPythonModel = stage_model(labeling)
