"""What identifies a model: the MD5 of each of its files, and one digest over them.

A model's *name* says nothing about its weights: two servers may serve different files under one name
(a retrained copy, a weight changed by hand), and a job must not take answers from the wrong one. CMS
configs declare the MD5 of their model files (``model_repository_agents { checksum ... }``); a model
without that block still has files, and their MD5 is what this module computes::

    files = file_digests(repository.get("deepmet"))    # {"1/model.onnx": "9e10..."}
    digest(files)                                      # "md5:3c41..." - one string for reports and outputs

The files are those of the version folder the model is served from (``<model>/<version>/...``, without
interpreter caches such as ``__pycache__``), plus any other file a checksum block names. An ensemble has
none of its own: its steps are checked one by one. Servers the project starts report these sums in their model
configs (``runtime_repository``), so a client can compare them with its own repository
(:func:`mismatch`) before it uses a server for a model.

Sums are cached by file identity (path, size, modification time), so a 1 GB model is read once per
process however many servers and jobs ask.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from ..atomic import write_text
from .repository import ModelInfo, ModelRepository, md5

_cache: dict[tuple[str, int, int], str] = {}
_lock = threading.Lock()


def file_md5(path: str | os.PathLike) -> str:
    """The MD5 of a file, computed once per (real path, size, mtime)."""
    real = os.path.realpath(path)
    stat = os.stat(real)
    key = (real, stat.st_size, stat.st_mtime_ns)
    with _lock:
        known = _cache.get(key)
    if known is None:
        known = md5(real)
        with _lock:
            _cache[key] = known
    return known


def file_digests(info: ModelInfo) -> dict[str, str]:
    """``{path relative to the model folder: md5}`` of every file of the served version, and of any file
    the config's checksums name (a declared sum is used as declared: ``verify_checksums`` checks it)."""
    if info.path is None:
        return dict(info.checksums())
    sums = dict(info.checksums())
    version_dir = info.path / str(info.version)
    for file in sorted(version_dir.rglob("*")):
        rel = file.relative_to(info.path).as_posix()
        if file.is_file() and not _cache_file(rel):
            sums.setdefault(rel, file_md5(file))
    return dict(sorted(sums.items()))


def _cache_file(rel: str) -> bool:
    """Files an interpreter or a desktop leaves beside a model (``__pycache__``, ``.DS_Store``): not the
    model, and different on every machine that imports a ``model.py``."""
    parts = rel.split("/")
    return "__pycache__" in parts or any(p.startswith(".") for p in parts) or rel.endswith(".pyc")


def local_md5(info: ModelInfo, rel: str) -> str | None:
    """The MD5 of ``<model folder>/rel`` in a local entry, or None when it has no such file."""
    target = info.path / rel if info.path is not None else None
    if target is None or not target.is_file():
        return None
    return file_md5(target)


def digest(files: Mapping[str, str]) -> str:
    """One string for a set of file sums (order-free): what reports and outputs record per model."""
    if not files:
        return "none"
    lines = "".join(f"{rel}\t{value}\n" for rel, value in sorted(files.items()))
    return "md5:" + hashlib.md5(lines.encode()).hexdigest()


def version_files(sums: Mapping[str, str], version: int | str) -> dict[str, str]:
    """The sums of one version of a model, its version folder's files keyed relative to that folder
    (``model.onnx``) and files outside any version folder as they are: what identifies a version whatever
    number it is served under (a fleet may serve as ``2/`` the files a job holds as ``1/``)."""
    out: dict[str, str] = {}
    for rel, value in sums.items():
        head, sep, rest = rel.partition("/")
        if not (sep and head.isdigit()):
            out[rel] = value
        elif head == str(version):
            out[rest] = value
    return dict(sorted(out.items()))


def version_digest(sums: Mapping[str, str], version: int | str) -> str:
    """One string for one version's files (:func:`version_files`): equal for the same files under any number."""
    return digest(version_files(sums, version))


def model_digest(repository: ModelRepository, name: str) -> str:
    """The digest of a repository's model: of its files, or for an ensemble of its steps' digests (the
    steps are what runs)."""
    info = repository.get(name)
    if info.platform == "ensemble":
        steps = dict.fromkeys(step.model_name for step in info.config.ensemble_scheduling.step)
        return digest({step: model_digest(repository, step) for step in steps})
    return digest(file_digests(info))


def mismatch(local: ModelInfo, remote: Mapping[str, str]) -> dict[str, tuple[str | None, str]]:
    """The files whose sums differ between a local entry and what a server reports:
    ``{rel: (local md5 or None when the local entry lacks the file, server md5)}``; empty when equal."""
    differ: dict[str, tuple[str | None, str]] = {}
    for rel, theirs in remote.items():
        ours = local_md5(local, rel)
        if ours != theirs:
            differ[rel] = (ours, theirs)
    return differ


def add_checksums(info: ModelInfo) -> list[str]:
    """Declares the MD5 of the served version's files in the model's ``config.pbtxt`` and returns the
    files newly declared. Sums already declared are verified (an error names a file that is not what its
    config declares) and kept; the block is appended as text, so the file's comments and layout stay.

    Raises:
        InferenceError: a declared checksum does not match its file.
    """
    info.verify_checksums()
    if info.path is None:
        return []
    declared = info.checksums()
    missing = {rel: value for rel, value in file_digests(info).items() if rel not in declared}
    if not missing:
        return []
    config_path = info.path / "config.pbtxt"
    if info.config.HasField("model_repository_agents"):  # one block per config: add to it (comments are lost)
        config = mc.ModelConfig()
        config.CopyFrom(info.config)
        agents = [a for a in config.model_repository_agents.agents if a.name == "checksum"]
        agent = agents[0] if agents else config.model_repository_agents.agents.add(name="checksum")
        for rel, value in missing.items():
            agent.parameters[f"MD5:{rel}"] = value
        text = text_format.MessageToString(config)
    else:
        entries = "".join(f"    parameters {{ key: {_quoted('MD5:' + rel)} value: {_quoted(value)} }}\n"
                          for rel, value in missing.items())
        text = config_path.read_text()
        text += ("" if text.endswith("\n") else "\n") + \
            f"model_repository_agents {{\n  agents {{\n    name: \"checksum\"\n{entries}  }}\n}}\n"
    write_text(str(config_path), "model config", text)
    return list(missing)


def _quoted(text: str) -> str:
    """A protobuf text-format string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
