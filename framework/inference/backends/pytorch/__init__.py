"""A Triton backend, written in Python, that serves ``platform: "pytorch_libtorch"`` (TorchScript) models.

Triton looks for ``<backend-directory>/pytorch/model.py`` when a model's platform maps to the ``pytorch``
backend and no ``libtriton_pytorch.so`` exists (the pip Triton has none); :mod:`...triton_install` links
this folder there. ``torchscript.py`` is shared with direct inference so both modes run a model identically.
"""
