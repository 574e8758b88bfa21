"""Code shared by the python-based backends (it runs inside the Triton python stub: no sonic-hep imports)."""
