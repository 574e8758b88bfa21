"""Triton python model exatrkx_labeling: the stage function of sonic_hep.modules.exatrkx, run on the server."""

from sonic_hep.modules.exatrkx.serving import LabelingModel as TritonPythonModel  # noqa: F401
