"""Builds the native onnxruntime backend (``libtriton_onnxruntime.so``) from what is installed, once, cached.

The pip Triton loads ``<backend-directory>/onnxruntime/libtriton_onnxruntime.so`` for ``platform:
"onnxruntime_onnx"`` models when it exists (``triton_install.backend_directory`` puts it there). No wheel
ships that library or the headers to build one, so ``backend.cc`` (with the project's own declarations
of the two C APIs it calls, ``triton_api.h`` and ``ort_api.h``) is compiled here with the system C++
compiler against the onnxruntime the server's python imports: ``onnxruntime/capi/libonnxruntime.so.1.*``
(onnxruntime >= 1.19), whose full path is built into the library, so the server needs no library path.

::

    from sonic_hep.framework.inference.backends.native.build import native_library
    path = native_library(python_runtime())   # ~/.cache/sonic-hep/native/ort-1.32.0-<hash>/libtriton_onnxruntime.so

    python -m sonic_hep.framework.inference.backends.native.build     # build now (e.g. at install time)

* cached per onnxruntime version and library path, source hash and architecture, in
  ``$XDG_CACHE_HOME/sonic-hep/native`` (default ``~/.cache``; a private temp folder when that is not
  writable), never inside the checkout;
* builds unused for 30 days (other onnxruntime versions, older sources) are removed when a new one is
  made (``library_cache.prune``);
* built atomically: each builder compiles in a folder of its own, checks the result by loading it in a
  fresh process (``sonic_native_probe``: opens onnxruntime through the same function table and checks the
  answers of a few calls), then renames it into place, so concurrent jobs and servers never see a
  half-written library, and a library that does not load is never cached;
* no compiler (``$CXX``, else ``g++``/``c++``) or no onnxruntime library raises :class:`NativeUnavailable`
  with one line saying what to install; the server then uses the python-based backend (``backend="auto"``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ...serving.library_cache import BuildOnce, build_cached, compile_library, library_cache_folders

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
#: what the library is compiled from (all of it goes into the cache key)
SOURCES = ("backend.cc", "triton_api.h", "ort_api.h")
LIBRARY_NAME = "libtriton_onnxruntime.so"
FLAGS = ("-std=c++17", "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-static-libstdc++", "-static-libgcc")


class NativeUnavailable(Exception):
    """The native backend cannot be built or loaded here; the message says why in one line."""


_builds = BuildOnce(NativeUnavailable)


def unsupported(config: Any) -> str | None:
    """Why the native backend cannot serve a model with this config (``model_config_pb2.ModelConfig``), or None:
    it serves fixed-size tensors only (no ``TYPE_STRING``) and no ``reshape`` (backend.cc refuses both at load,
    which would stop the whole server; the server checks first and uses the python-based backend instead)."""
    from tritonclient.grpc import model_config_pb2 as mc

    for kind, tensors in (("input", config.input), ("output", config.output)):
        for tensor in tensors:
            if tensor.data_type == mc.TYPE_STRING:
                return f"{kind} {tensor.name!r} is TYPE_STRING"
            if tensor.HasField("reshape"):
                return f"{kind} {tensor.name!r} has a reshape"
    return None


def onnxruntime_library(python: Any = None) -> tuple[Path, str]:
    """``(libonnxruntime.so.1.x path, version)`` of the onnxruntime that ``python`` (a ``PythonRuntime``; default
    this interpreter) imports, found without importing it.

    Raises:
        NativeUnavailable: onnxruntime is missing, or too old to ship its C library (< 1.19).
    """
    executable = getattr(python, "executable", None) or sys.executable
    if executable == sys.executable:
        import importlib.util

        spec = importlib.util.find_spec("onnxruntime")
        folder = list(spec.submodule_search_locations or [])[0] if spec else None
    else:
        probe = ("import importlib.util, json; s = importlib.util.find_spec('onnxruntime'); "
                 "print(json.dumps(list(s.submodule_search_locations)[0] if s else None))")
        try:
            out = subprocess.run([executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
            folder = json.loads(out.stdout)
        except (OSError, subprocess.SubprocessError, ValueError) as err:
            raise NativeUnavailable(f"cannot ask {executable} where onnxruntime is: {err}") from None
    if not folder:
        raise NativeUnavailable(f"onnxruntime is not installed for {executable} (pip install onnxruntime)")
    candidates = sorted(Path(folder, "capi").glob("libonnxruntime.so.1.*"), key=lambda p: len(p.name))
    if not candidates:
        raise NativeUnavailable(f"{folder} has no capi/libonnxruntime.so.1.* (onnxruntime >= 1.19 ships it; "
                                f"pip install -U onnxruntime)")
    library = candidates[-1].resolve()
    return library, library.name.removeprefix("libonnxruntime.so.")


def compiler() -> str:
    """The C++ compiler: ``$CXX``, else ``g++`` or ``c++`` on PATH.

    Raises:
        NativeUnavailable: none found (``apt-get install g++``).
    """
    chosen = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not chosen:
        raise NativeUnavailable("no C++ compiler (apt-get install g++, or set CXX)")
    found = shutil.which(chosen)
    if not found:
        raise NativeUnavailable(f"the C++ compiler {chosen!r} (CXX) was not found (apt-get install g++, or set CXX)")
    return found


def cache_folders() -> list[Path]:
    """Where built libraries are kept, in order of preference (never inside the checkout)."""
    return library_cache_folders("native")


def build_key(library: Path, version: str) -> str:
    """The cache folder name: the onnxruntime version, then a hash of the sources, flags, library path and
    architecture (any of them changing means a new build; a shared $HOME may serve machines of other kinds)."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update((HERE / name).read_bytes())
    digest.update("\0".join([*FLAGS, str(library), platform.machine()]).encode())
    return f"ort-{version}-{digest.hexdigest()[:16]}"


def native_library(python: Any = None) -> Path:
    """The native backend library for the onnxruntime that ``python`` imports, built on first use.

    Raises:
        NativeUnavailable: no compiler, no onnxruntime library, or the build or its check failed.
    """
    library, version = onnxruntime_library(python)
    key = build_key(library, version)
    return _builds.get(cache_folders(), key, LIBRARY_NAME, lambda: _build(library, key))


def _build(library: Path, key: str) -> Path:
    cxx = compiler()

    def make(partial: Path) -> None:
        compile_library([cxx, *FLAGS, f'-DSONIC_ORT_LIBRARY="{library}"', str(HERE / "backend.cc"), "-o", str(partial),
                         "-ldl"], "backend.cc", NativeUnavailable)
        check(partial)

    try:
        target = build_cached(cache_folders(), key, LIBRARY_NAME, "ort-*", make)
    except OSError as err:
        raise NativeUnavailable(f"cannot write the native backend to any cache folder ({err})") from None
    log.info("built the native onnxruntime backend %s (onnxruntime library %s)", target, library)
    return target


def check(path: Path) -> str:
    """Loads ``path`` in a fresh python process and runs its probe; returns the onnxruntime version it opened.

    Raises:
        NativeUnavailable: it does not load, or its probe fails (e.g. a wrong onnxruntime API table).
    """
    script = ("import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); buf = ctypes.create_string_buffer(1024); "
              "code = lib.sonic_native_probe(buf, 1024); print(buf.value.decode(errors='replace')); sys.exit(code)")
    try:
        done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as err:
        raise NativeUnavailable(f"cannot check {path.name}: {err}") from None
    if done.returncode != 0:
        why = (done.stdout.strip() or done.stderr.strip().splitlines()[-1:] or ["it crashed"])
        raise NativeUnavailable(f"the built {path.name} does not work: {why if isinstance(why, str) else why[0]}")
    return done.stdout.strip()


if __name__ == "__main__":  # build now: python -m sonic_hep.framework.inference.backends.native.build
    try:
        print(native_library())
    except NativeUnavailable as error:
        print(f"native onnxruntime backend unavailable: {error}", file=sys.stderr)
        sys.exit(1)
