"""Several versions of one model side by side on a running server: what a fleet's rolling update asks of each
of its servers (``workflows/grid/fleet_rollout.py``).

A server started with ``model_control: explicit`` loads models again through Triton's repository API.
:func:`serve_versions` makes it serve exactly the given versions of a model: each version folder is linked
into the server's runtime repository (``<work folder>/repository/<model>/<number>``, beside the links
``runtime_repository`` made at start), the runtime ``config.pbtxt`` gets ``version_policy { specific {
versions: [...] } }`` and the MD5 sums of every served version's files (clients pin the version whose files
are theirs: ``sonic/version_pins.py``), and the model is loaded again. Triton keeps serving the versions it
had while it loads the new ones, and unloads those the policy no longer names; requests to a version it keeps
are not disturbed (thousands of requests to version 1 during a load of 1 + 2 and then during the unload of 1,
on both the native and the python-based backend: none failed).

Every version's files are checked against the digest they were rolled out with before they are served, as a
repository's declared checksums are at start: files changed since are refused, never served. A version that
does not load leaves the server as it was (its previous versions serving, its previous config and links), and
the error names the model, the versions and Triton's reason.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from ...atomic import write_atomically
from ...errors import InferenceError
from ..model_digest import file_digests, version_digest
from ..repository import CHECKSUM_PARAMETER, ModelInfo, backend_of, load_model, parse_config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VersionSource:
    """One version a server is to serve, and where its files are.

    Attributes:
        number: the version number the server serves it under.
        folder: a model folder (``config.pbtxt`` and version folders) holding it.
        source_version: its version folder there (``<folder>/<source_version>/``).
        digest: the digest of its files (``model_digest.version_digest``) when it was rolled out.
    """

    number: int
    folder: str
    source_version: int
    digest: str

    def served_sums(self) -> dict[str, str]:
        """The MD5 sums of its files keyed as the server holds them (``<number>/<file>``; a file outside the
        version folders as it is), after checking them against :attr:`digest`.

        Raises:
            InferenceError: a declared checksum that does not match, or files changed since the roll-out.
        """
        info = replace(load_model(self.folder), version=self.source_version)
        info.verify_checksums()
        sums = file_digests(info)
        found = version_digest(sums, self.source_version)
        if found != self.digest:
            raise InferenceError(f"model {info.name!r} version {self.number}: the files of "
                                 f"{Path(self.folder) / str(self.source_version)} changed since it was rolled out "
                                 f"(digest {found}, rolled out as {self.digest}); roll it out again to serve them")
        served = {}
        for rel, value in sums.items():
            head, sep, rest = rel.partition("/")
            if not (sep and head.isdigit()):
                served[rel] = value
            elif head == str(self.source_version):
                served[f"{self.number}/{rest}"] = value
        return served


def source_of(folder: str | os.PathLike, number: int | None = None,
              verify: bool = True) -> tuple[ModelInfo, VersionSource]:
    """The model in a model folder (its highest version, or the one its policy names) and that version as one to
    serve under ``number`` (default: its own number), its declared checksums verified unless ``verify`` is off
    (a repository a server already verified at start).

    Raises:
        InferenceError: the folder holds no model, or a declared checksum does not match (naming the file).
    """
    info = load_model(folder)
    if verify:
        info.verify_checksums()
    digest = version_digest(file_digests(info), info.version)
    return info, VersionSource(number or info.version, str(Path(folder).resolve()), info.version, digest)


def interface_problem(served: ModelInfo, new: ModelInfo) -> str:
    """Why ``new`` cannot be served as a version of ``served`` ("" when it can): Triton serves every version of a
    model under one config, so a version must take the same inputs and give the same outputs on the same
    platform and batch size (a changed model goes under a new name)."""
    def shown(specs: list) -> str:
        return ", ".join(f"{t.name} {t.datatype} {list(t.dims)}" for t in specs)

    for what, ours, theirs in (("platform", backend_of(served.config), backend_of(new.config)),
                               ("max_batch_size", served.max_batch_size, new.max_batch_size),
                               ("inputs", shown(served.inputs), shown(new.inputs)),
                               ("outputs", shown(served.outputs), shown(new.outputs))):
        if ours != theirs:
            return f"its {what} differ from the served model's ({theirs} instead of {ours})"
    return ""


def serve_versions(server: Any, model: str, sources: list[VersionSource]) -> list[str]:
    """Makes ``server`` (a started :class:`~.server.TritonServer`) serve exactly ``sources`` of ``model``;
    returns the versions of the model ready afterwards.

    Raises:
        InferenceError: the server's model control is not explicit, a version's files are not what was rolled
            out, or a version did not load (the server then serves what it served before).
    """
    if server.model_control != "explicit":
        raise InferenceError(f"server {server.grpc_url} runs with model control {server.model_control!r}: it loads "
                             f"no version of {model!r} later (start it with --model-control explicit)")
    if not sources:
        raise InferenceError(f"model {model!r}: a server must serve at least one version of it")
    entry = Path(server.workdir) / "repository" / model
    config_path = entry / "config.pbtxt"
    before = config_path.read_text()
    links = {p.name: os.readlink(p) for p in entry.iterdir() if p.name.isdigit() and p.is_symlink()}
    config = parse_config(config_path)
    sums: dict[str, str] = {}
    for source in sources:
        sums.update(source.served_sums())
    for key in [k for k in config.parameters if k.startswith(CHECKSUM_PARAMETER)]:
        del config.parameters[key]
    for rel, value in sorted(sums.items()):
        config.parameters[CHECKSUM_PARAMETER + "MD5:" + rel].string_value = value
    numbers = sorted(source.number for source in sources)
    config.version_policy.specific.versions[:] = numbers
    for source in sources:
        _link(entry / str(source.number), Path(source.folder).resolve() / str(source.source_version))
    _write(config_path, text_format.MessageToString(config))
    try:
        _load(server, model)
    except InferenceError as err:
        _write(config_path, before)
        for name in {p.name for p in entry.iterdir() if p.name.isdigit()} - set(links):
            (entry / name).unlink()
        for name, target in links.items():
            _link(entry / name, Path(target))
        try:
            _load(server, model)
        except InferenceError as again:
            log.warning("model %r on %s: the versions it served before did not load again either: %s", model,
                        server.grpc_url, again)
        raise InferenceError(f"model {model!r} versions {numbers} did not load on server {server.grpc_url}: "
                             f"{err}; it serves what it served before") from None
    for name in set(links) - {str(n) for n in numbers}:
        (entry / name).unlink(missing_ok=True)  # no longer served: the links go too
    return ready_versions(server).get(model, [])


def ready_versions(server: Any) -> dict[str, list[str]]:
    """``{model: its versions ready}`` on ``server``, from its repository index (HTTP, on loopback): the readiness
    of each version, which Triton's server-wide readiness is not after a version failed to load."""
    ready: dict[str, list[str]] = {}
    for entry in _post(server, "/v2/repository/index"):
        if entry.get("state") == "READY":
            ready.setdefault(entry["name"], []).append(str(entry.get("version", "")))
    return {model: sorted(versions, key=lambda v: int(v) if v.isdigit() else -1) for model, versions in ready.items()}


def _load(server: Any, model: str) -> None:
    """Triton's repository load of ``model`` from its config on disk; its refusal as one line."""
    _post(server, f"/v2/repository/models/{model}/load", timeout=server.startup_timeout)


def _post(server: Any, path: str, timeout: float = 10.0) -> Any:
    request = urllib.request.Request(f"http://{server.http_url}{path}", data=b"{}", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as err:
        text = err.read().decode(errors="replace")
        try:
            text = json.loads(text).get("error", text)
        except ValueError:
            pass
        raise InferenceError(" ".join(text.split())) from None
    except (urllib.error.URLError, OSError) as err:
        raise InferenceError(f"server {server.grpc_url} did not answer {path}: {err}") from None
    return json.loads(body) if body.strip() else None


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() or link.exists():
        if link.is_symlink() and Path(os.readlink(link)) == target:
            return
        link.unlink()
    link.symlink_to(target)


def _write(path: Path, text: str) -> None:
    write_atomically(path, lambda temporary: Path(temporary).write_text(text))
