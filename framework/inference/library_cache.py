"""Where the small libraries this project compiles on first use are kept.

Two are built on the user's machine because no wheel ships them: the preload library that keeps
Triton's python-backend shared memory private (``private_memory.py``) and the native onnxruntime
backend (``backends/native/build.py``). Both keep them out of the checkout, in the user's cache
(``$XDG_CACHE_HOME`` or ``~/.cache``), with a private temp folder as the fallback when that is not
writable (read-only homes on batch nodes).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def library_cache_folders(kind: str) -> list[Path]:
    """Folders for built libraries of ``kind`` ("lib", "native"), in order of preference."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [Path(base) / "sonic-hep" / kind, Path(tempfile.gettempdir()) / f"sonic-hep-{kind}-{os.getuid()}"]
