"""A Triton backend, written in Python, that serves ``platform: "onnxruntime_onnx"`` models with onnxruntime.

Triton looks for ``<backend-directory>/onnxruntime/model.py`` when a model's platform maps to the
``onnxruntime`` backend and no ``libtriton_onnxruntime.so`` exists; :mod:`..server` links this folder
there. ``ort_session.py`` is shared with direct inference so both modes open a model identically.
"""
