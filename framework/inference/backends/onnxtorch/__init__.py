"""A Triton backend, written in Python, that serves an ONNX model's ``model.onnx`` with torch (``onnx_graph.py``).

For GPU machines whose onnxruntime has no CUDA provider: a repository entry with ``backend: "onnxtorch"``
(``sonic bench gpu-models`` writes such entries for the MiniAOD models) runs the same file, on the
instance's GPU for ``KIND_GPU``. ``onnx_graph.py`` is shared with in-process (direct) GPU inference.
"""
