"""Where the pip-installed Triton server lives, and the backend directory it needs to run our models.

The ``nvidia-pytriton`` wheel ships a real ``tritonserver`` binary with the python backend and one
python stub per Python version. Serving ONNX models through it needs a *backend directory* laid out as::

    <backend-directory>/python/libtriton_python.so            a real file (a symlink is refused)
    <backend-directory>/python/triton_python_backend_stub     the stub for the server python's version
    <backend-directory>/python/triton_python_backend_utils.py
    <backend-directory>/onnxruntime/                          our python-based onnxruntime backend, or a
                                                              folder holding the native libtriton_onnxruntime.so
    <backend-directory>/pytorch/, tensorflow/                 our python-based torch and tensorflow backends
                                                              (``pytorch_libtorch``, ``tensorflow_*`` models; a
                                                              model whose engine does not import in the server's
                                                              python is left out: ``servable.py``)

plus an environment where the stub finds its interpreter: the server python's ``bin/`` first on
``PATH``, and ``LD_LIBRARY_PATH`` reaching the wheel's bundled libraries and, for a non-system python
(pyenv, conda), that interpreter's ``LIBDIR``. :func:`backend_directory` and :func:`server_environment`
build both; the python is selectable (the GPU machine runs its own python3.12 with torch).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ...errors import InferenceError
from ...extras import require
from .. import backends

#: our python-based backends (folder name = backend name Triton maps a platform to)
BACKENDS = Path(backends.__file__).resolve().parent  # the code that runs inside a server
#: the backend name Triton maps ``platform: "onnxruntime_onnx"`` to (python-based or native)
NATIVE_BACKEND = "onnxruntime"


@dataclass(frozen=True)
class TritonInstall:
    """The files of the pip-installed Triton server.

    Attributes:
        root: ``site-packages/pytriton/tritonserver``.
        binary: the ``tritonserver`` executable.
        libs: the wheel's bundled shared libraries (``nvidia_pytriton.libs``).
    """

    root: Path
    binary: Path
    libs: Path

    @property
    def python_backend(self) -> Path:
        return self.root / "backends" / "python"

    def stub(self, version: str) -> Path:
        """The python backend stub built for Python ``version`` (e.g. "3.11")."""
        path = self.root / "python_backend_stubs" / version / "triton_python_backend_stub"
        if not path.exists():
            have = sorted(p.name for p in (self.root / "python_backend_stubs").iterdir())
            raise InferenceError(f"the Triton wheel has no python backend stub for Python {version} (has {have}); "
                                 f"run the server with another python (--python)")
        return path


@functools.cache
def find_install() -> TritonInstall:
    """Locates the ``tritonserver`` binary of the ``nvidia-pytriton`` wheel.

    Raises:
        InferenceError: when the wheel is missing (naming the install command).
    """
    pytriton = require("pytriton", "the Triton server", InferenceError)
    root = Path(pytriton.__file__).resolve().parent / "tritonserver"
    binary = root / "bin" / "tritonserver"
    if not binary.exists():
        raise InferenceError(f"{binary} not found: the nvidia-pytriton install is incomplete")
    libs = root.parent.parent / "nvidia_pytriton.libs"
    return TritonInstall(root=root, binary=binary, libs=libs)


@dataclass(frozen=True)
class PythonRuntime:
    """The interpreter the python stub embeds: its version, ``bin/`` and ``LIBDIR``."""

    executable: str
    version: str
    libdir: str

    @property
    def bin_dir(self) -> str:
        return os.path.dirname(self.executable)


@functools.cache
def python_runtime(executable: str | None = None) -> PythonRuntime:
    """Describes ``executable`` (default: this interpreter) without importing anything from it."""
    executable = executable or sys.executable
    if executable == sys.executable:
        import sysconfig

        return PythonRuntime(executable, f"{sys.version_info.major}.{sys.version_info.minor}",
                             sysconfig.get_config_var("LIBDIR") or "")
    probe = ("import json, sys, sysconfig; print(json.dumps([f'{sys.version_info.major}.{sys.version_info.minor}', "
             "sysconfig.get_config_var('LIBDIR') or '']))")
    try:
        out = subprocess.run([executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        raise InferenceError(f"cannot run the server python {executable!r}: {err}") from None
    version, libdir = json.loads(out.stdout)
    return PythonRuntime(executable, version, libdir)


def backend_directory(dest: str | os.PathLike, python: PythonRuntime, extra_backends: dict[str, Path] | None = None,
                      native_library: Path | None = None) -> Path:
    """Lays out a backend directory in ``dest`` (see the module docstring) and returns it.

    Args:
        dest: an empty or existing folder (one per server; it is cheap: one 1.4 MB copy, links otherwise).
        python: the interpreter the python stub will run.
        extra_backends: more python-based backends, ``{backend name: folder holding model.py}``.
        native_library: the compiled native onnxruntime backend (``backends/native/build.py``); when given,
            ``onnxruntime/`` holds a copy of it instead of the python-based backend (Triton refuses a backend
            library reached through a link out of the backend directory).
    """
    install = find_install()
    dest = Path(dest)
    python_dir = dest / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    library = python_dir / "libtriton_python.so"
    if not library.exists():
        shutil.copy2(install.python_backend / "libtriton_python.so", library)
    _link(install.python_backend / "triton_python_backend_utils.py", python_dir / "triton_python_backend_utils.py")
    _link(install.stub(python.version), python_dir / "triton_python_backend_stub")
    backends = {p.name: p for p in BACKENDS.iterdir() if (p / "model.py").exists()}
    backends.update(extra_backends or {})
    if native_library is not None:
        backends.pop(NATIVE_BACKEND, None)
        folder = dest / NATIVE_BACKEND
        if folder.is_symlink():
            folder.unlink()
        folder.mkdir(exist_ok=True)
        shutil.copy2(native_library, folder / f"libtriton_{NATIVE_BACKEND}.so")
    for name, folder in backends.items():
        _link(Path(folder).resolve(), dest / name)
    return dest


def server_environment(python: PythonRuntime, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a ``tritonserver`` process whose python models run on ``python``."""
    install = find_install()
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([python.bin_dir, env.get("PATH", "")])
    libraries = [str(install.libs)]
    if python.libdir:
        libraries.append(python.libdir)
    if env.get("LD_LIBRARY_PATH"):
        libraries.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(libraries)
    env.pop("PYTHONHOME", None)
    env.update(extra or {})
    return env


def _link(target: Path, link: Path) -> None:
    if link.is_symlink() or link.exists():
        if link.is_symlink() and Path(os.readlink(link)) == target:
            return
        if link.is_dir() and not link.is_symlink():  # a native backend's folder from an earlier start
            shutil.rmtree(link)
        else:
            link.unlink()
    link.symlink_to(target)
