"""Where the project's own files are: the one place that knows the package's layout on disk.

Shipped configurations name model folders relative to the project (``data/models/miniaod``) so that they
work from any working directory; benchmarks find shipped models; a development checkout has CMS's models
in a ``shared`` folder beside it. Code asks here instead of counting ``parents[N]`` of its own file, which
breaks the day a file moves.

``SONIC_HEP_SHARED`` points at another shared folder (the tests honour it too).
"""

from __future__ import annotations

import os
from pathlib import Path

#: the package's folder (a checkout's root: the package is installed in editable mode, its folders mapped
#: by name, which importlib.resources cannot walk); this file is ``<root>/framework/paths.py``
PROJECT_ROOT = Path(__file__).resolve().parent.parent
#: the shipped model repositories
MODELS = PROJECT_ROOT / "data" / "models"


def shared_folder() -> Path:
    """The folder of material beside a development checkout (``$SONIC_HEP_SHARED``, else ``../shared``);
    it may not exist (a user's checkout has none)."""
    return Path(os.environ.get("SONIC_HEP_SHARED", PROJECT_ROOT.parent / "shared"))


def project_path(path: str | os.PathLike) -> Path:
    """``path`` as given when it exists or is absolute, else relative to the project (so a shipped
    configuration's ``data/models/miniaod`` works from any folder)."""
    given = Path(path)
    if given.is_absolute() or given.exists():
        return given
    candidate = PROJECT_ROOT / given
    return candidate if candidate.exists() else given
