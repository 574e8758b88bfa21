"""Carries the pip ``tritonserver`` to a machine that cannot install it (no network; ``offline_run.sh``).

The ``nvidia-pytriton`` wheel with its libraries is ~145 MB; the bundle holds only the server part,
xz-compressed to ~27 MB: ``tritonserver``, its bundled libraries (without the unneeded ``libpython3.13``),
the python backend and the stub of one Python version. :func:`unpack` lays it out as the wheel does
(``<site>/pytriton/tritonserver``, ``<site>/nvidia_pytriton.libs``) with an empty ``pytriton/__init__.py``, so that
``framework.inference.serving.triton_install.find_install`` finds it once ``<site>`` is on ``PYTHONPATH``.

::

    python -m sonic_hep.workflows.bench._triton_bundle pack offline/tritonserver-py312.tar.xz --python 3.12
    python -m sonic_hep.workflows.bench._triton_bundle unpack offline/tritonserver-py312.tar.xz /tmp/site
"""

from __future__ import annotations

import argparse
import lzma
import tarfile
from pathlib import Path

SKIP_LIBS = ("libpython3",)  # pytriton's own bindings need it, the server does not


def _wheel_root() -> Path:
    import pytriton  # noqa: PLC0415 - only where the wheel is installed

    return Path(pytriton.__file__).resolve().parent.parent


def pack(archive: str | Path, python: str = "3.12", preset: int = 6) -> Path:
    """Writes the server part of the installed wheel, with the stub for Python ``python``, to ``archive``."""
    site = _wheel_root()
    server = site / "pytriton" / "tritonserver"
    members = [server / "bin", server / "backends" / "python" / "libtriton_python.so",
               server / "backends" / "python" / "triton_python_backend_utils.py",
               server / "python_backend_stubs" / python / "triton_python_backend_stub"]
    libs = [p for p in (site / "nvidia_pytriton.libs").iterdir() if not p.name.startswith(SKIP_LIBS)]
    archive = Path(archive)
    archive.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(archive, "wb", preset=preset) as raw, tarfile.open(fileobj=raw, mode="w") as tar:
        init = tarfile.TarInfo("pytriton/__init__.py")
        tar.addfile(init)
        for path in members + libs:
            tar.add(path, arcname=str(path.relative_to(site)))
    return archive


def unpack(archive: str | Path, site: str | Path) -> Path:
    """Extracts ``archive`` into ``site`` (put it on ``PYTHONPATH``); returns the ``tritonserver`` binary."""
    site = Path(site)
    site.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(site, filter="tar")
    return site / "pytriton" / "tritonserver" / "bin" / "tritonserver"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("pack", help="archive the installed wheel's server")
    p.add_argument("archive")
    p.add_argument("--python", default="3.12", help="Python version of the stub to include")
    u = sub.add_parser("unpack", help="extract an archive into a site directory")
    u.add_argument("archive")
    u.add_argument("site")
    args = parser.parse_args(argv)
    print(pack(args.archive, args.python) if args.action == "pack" else unpack(args.archive, args.site))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
