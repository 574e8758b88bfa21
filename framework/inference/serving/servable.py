"""Which models a server can serve, and why not: decided once, before the server starts.

Triton refuses to start when one model of its repository cannot load (``unable to find backend library
for backend 'pytorch'`` ... ``failed to load all models``), and CMS's real ``models/`` folder mixes
ONNX models with TorchScript twins. A server therefore serves what it can and names the rest with
the reason (``sonic server start --strict`` refuses instead). A model is servable when:

* its backend (:func:`~.repository.backend_of`) is one the pip Triton runs itself (``python``,
  ``ensemble``) or one of our python-based backends (a folder with ``model.py`` under
  ``framework/inference/backends/``, or one the caller adds);
* the engine that backend needs imports in the *server's* python (torch for ``pytorch``, tensorflow for
  ``tensorflow``; onnxruntime is a dependency of sonic-hep and not probed);
* its model file exists (``<version>/model.pt`` ..., or the config's ``default_model_filename``), for the
  platforms whose file name Triton knows, and passes the cheap checks of ``backends/common/model_file.py``
  (not empty, not truncated, an ONNX model where one is expected, small enough to parse): with the pip
  server's ``--exit-on-error`` one unloadable file would otherwise stop the server and every model in it;
* for an ensemble, every step model is served.

Example::

    skipped = unservable([repo.get(n) for n in repo.names()], sys.executable)
    # {"deepmet_tf": "platform 'tensorflow_savedmodel' runs on the python-based 'tensorflow' backend, ..."}
"""

from __future__ import annotations

import functools
import logging
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from ...errors import InferenceError
from ..backends.common import model_file
from ..repository import DEFAULT_MODEL_FILES, ModelInfo, backend_of
from .triton_install import BACKENDS, PythonRuntime

#: backends the pip Triton runs without a backend folder of ours
BUILTIN = frozenset({"python", "ensemble"})
log = logging.getLogger(__name__)

#: our python-based backends → the module their ``model.py`` needs in the server's python (onnxruntime,
#: a dependency of sonic-hep, is not probed: every server start would pay for the import)
ENGINES: dict[str, str] = {"pytorch": "torch", "tensorflow": "tensorflow", "onnxtorch": "torch"}


def backend_names(extra: Iterable[str] = ()) -> set[str]:
    """The backends a server of ours has: Triton's own, our python-based ones, and ``extra``."""
    ours = {p.name for p in BACKENDS.iterdir() if (p / "model.py").exists()}
    return set(BUILTIN) | ours | set(extra)


@functools.cache
def import_problem(python: str, module: str) -> str:
    """Why ``module`` does not import in the interpreter ``python`` ("" when it does).

    Run in a child process (the server's python may not be this one, and importing torch here would
    grow every job that starts a server); answered once per interpreter and module.
    """
    if python == sys.executable and module in sys.modules:
        return ""
    try:
        result = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as err:
        return f"cannot run {python}: {err}"
    if result.returncode == 0:
        return ""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"import {module} exited with code {result.returncode}"


def reason(info: ModelInfo, python: str, backends: set[str]) -> str:
    """Why the server cannot serve ``info`` on its own ("" when it can; ensembles: see :func:`unservable`)."""
    backend = backend_of(info.config)
    what = f"platform {info.platform!r}" if info.config.platform else f"backend {backend!r}"
    if backend not in backends:
        return (f"{what}: this server has no {backend!r} backend (it has {', '.join(sorted(backends))}); "
                f"serve the model on a Triton server that has one")
    module = ENGINES.get(backend)
    if module:
        problem = import_problem(python, module)
        if problem:
            return (f"{what} runs on the python-based {backend!r} backend, which needs {module} in the server's "
                    f"python ({python}): {problem}")
    knows_file = bool(info.config.default_model_filename) or info.platform in DEFAULT_MODEL_FILES
    if backend not in BUILTIN and info.path is not None and knows_file:  # a custom backend reads what it likes
        path = info.model_file()
        if not path.exists():
            return f"{what}: its model file {path} does not exist"
        unloadable = model_file.problem(path, model_file.kind_of(backend, info.platform))
        if unloadable:
            return f"{what}: {unloadable}"
    return ""


def unservable(infos: Iterable[ModelInfo], python: str, extra_backends: Iterable[str] = ()) -> dict[str, str]:
    """``{model name: reason}`` for each model of ``infos`` the server cannot serve (see the module docstring).

    Args:
        infos: the models asked for.
        python: the interpreter the server's python stubs run.
        extra_backends: python-based backends the caller adds to the server.
    """
    backends = backend_names(extra_backends)
    infos = list(infos)
    skipped = {info.name: why for info in infos if (why := reason(info, python, backends))}
    ensembles = [info for info in infos if info.backend == "ensemble" and info.name not in skipped]
    changed = True
    while changed:  # an ensemble of an ensemble whose step is skipped is skipped too
        changed = False
        served = {info.name for info in infos} - set(skipped)
        for info in ensembles:
            if info.name in skipped:
                continue
            for step in info.config.ensemble_scheduling.step:
                if step.model_name not in served:
                    why = skipped.get(step.model_name, "not among the served models")
                    skipped[info.name] = f"ensemble step {step.model_name!r} is not served ({why})"
                    changed = True
                    break
    return skipped


def one_line(skipped: Mapping[str, str]) -> str:
    """The skipped models and reasons on one line, for ``--strict``'s error and logs."""
    return "; ".join(f"{name!r}: {why}" for name, why in skipped.items())


def serves_with_onnxruntime(info: ModelInfo) -> bool:
    """True when Triton maps the model to the ``onnxruntime`` backend (its platform or backend says so:
    ``repository.backend_of``, the one classification)."""
    return info.backend == "onnxruntime"


def model_backend(info: ModelInfo, native: bool) -> str:
    """What serves ``info`` on a server: "onnxruntime (native)", "onnxruntime (python-based)", "python",
    "pytorch (python-based)", "tensorflow (python-based)", "ensemble", or the backend's name for anything else."""
    if serves_with_onnxruntime(info):
        return "onnxruntime (native)" if native else "onnxruntime (python-based)"
    return f"{info.backend} (python-based)" if info.backend in ENGINES else info.backend or "?"


def native_library_for(served: list[ModelInfo], backend: str, python: PythonRuntime) -> Path | None:
    """The native onnxruntime backend library when a server with ``backend`` ("auto", "native", "python")
    serving ``served`` uses it, else None.

    Built only when a served model maps to the onnxruntime backend. With ``"auto"`` a library that cannot be
    built (no compiler, no onnxruntime library), or a model it cannot serve (strings, a reshape: one backend
    serves every ONNX model of a server), means the python-based backend, said in one line; with
    ``"native"`` it is an error.
    """
    onnx = [info for info in served if serves_with_onnxruntime(info)]
    if backend == "python" or not onnx:
        return None
    from ..backends.native.build import NativeUnavailable, native_library, unsupported

    try:
        for info in onnx:
            why = unsupported(info.config)
            if why:
                raise NativeUnavailable(f"model {info.name!r}: {why}, which only the python-based backend serves")
        return native_library(python)
    except NativeUnavailable as err:
        if backend == "native":
            raise InferenceError(f"the native onnxruntime backend is not available: {err}") from None
        log.warning("native onnxruntime backend unavailable (%s); ONNX models are served by the python-based "
                    "backend", err)
        return None
