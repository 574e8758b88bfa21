"""What runs inside a Triton server: the python-based onnxruntime backend (``onnxruntime/model.py``) and
the glue of python models that run a workflow's stage functions (``python_stage.py``)."""
