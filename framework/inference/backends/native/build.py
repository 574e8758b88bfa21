"""Builds (once, cached) the native onnxruntime backend library for the server's onnxruntime.

Placeholder of the interface: :func:`native_library` returns the compiled ``libtriton_onnxruntime.so`` or
raises :class:`NativeUnavailable` saying why (no compiler, no onnxruntime library, a failed build).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class NativeUnavailable(Exception):
    """The native backend cannot be built or loaded here; the message says why in one line."""


def native_library(python: Any) -> Path:
    """The native backend library for the onnxruntime that ``python`` (a ``PythonRuntime``) imports.

    Raises:
        NativeUnavailable: the library cannot be built or loaded here.
    """
    raise NativeUnavailable("the native onnxruntime backend is not built yet in this version")
