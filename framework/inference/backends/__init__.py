"""Python-based Triton backends shipped with sonic-hep (see ``onnxruntime/model.py``)."""
