"""The native onnxruntime backend: ``libtriton_onnxruntime.so`` compiled on this machine (see ``build.py``)."""
