"""A Triton backend, written in Python, for ``tensorflow_savedmodel`` / ``tensorflow_graphdef`` models,
used when tensorflow imports in the server's python (otherwise such models are reported as not served)."""
