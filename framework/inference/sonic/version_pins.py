"""One version of each model per job: which version a job takes, and its number on each server.

A server may serve several versions of a model side by side: a fleet rolling a new version in keeps the old
one for the jobs that started with it (``workflows/grid/fleet_rollout.py``). A job must take every answer of
a model from one of them, on every server, from its first request to its end. Which one is decided once per
model, when the model is first needed:

* **a job with a local copy** (its repository holds the model) takes the files of that copy, as always;
* **a job without one** takes the newest version ready on the first server it checks, as that server
  reports its files.

On each server, every request of the model then names the version whose files are the job's (their MD5 sums
compared relative to the version folder, ``model_digest.version_files``: a fleet may serve as ``2/`` what
the job holds as ``1/``). A server with no such version ready is passed over for the model (``servers.py``),
as a server serving other files always was. A version pinned in the configuration (``model_versions``) is
the only one considered on every server.

Listeners (:meth:`VersionPins.watch`) hear of each decision before any server is asked for that version, so
a fleet knows which versions its jobs use before their first request reaches it (``serving/fleet_use.py``),
and hear at :meth:`VersionPins.close` that the job is done with them.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Protocol

from ..model_digest import digest, file_digests, version_files
from ..repository import ModelInfo, ModelRepository, config_checksums
from ..triton_errors import RequestError
from .model_identity import version_problem

log = logging.getLogger(__name__)


class Pinnable(Protocol):
    """What pinning needs of a server (a :class:`~.connection.ServerConnection`, or a test's fake)."""

    address: str
    model_versions: dict[str, str]

    def model_info(self, model: str) -> ModelInfo: ...

    def ready_versions(self, model: str) -> list[str]: ...


class Listener(Protocol):
    """Told the job's versions (``{model: content digest}``) whenever one is decided, and when the job ends."""

    def changed(self, used: dict[str, str]) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class JobVersion:
    """The job's version of one model.

    Attributes:
        files: the version's sums relative to its version folder (:func:`~.model_digest.version_files`).
        digest: what the job's output records: its local copy's digest, or the digest the server reported for
            the version (its files as the server's repository holds them).
    """

    files: dict[str, str]
    digest: str

    @property
    def content(self) -> str:
        """The same string for the same files under any version number (what a fleet compares)."""
        return digest(self.files)


def _in_version(rel: str, version: str) -> bool:
    """Whether ``rel`` belongs to ``version``: inside its folder, or outside every version folder."""
    head, sep, _ = rel.partition("/")
    return not (sep and head.isdigit()) or head == version


def _folders(sums: dict[str, str]) -> set[str]:
    """The version folders that ``sums`` name files in."""
    return {rel.partition("/")[0] for rel in sums if not _in_version(rel, "")}


class VersionPins:
    """The job's version of each model and its number on each server (see the module docstring).

    Args:
        repository (ModelRepository | None): the job's own repository (None: no local copies).
    """

    def __init__(self, repository: ModelRepository | None):
        self.repository = repository
        self._lock = threading.Lock()
        self._chosen: dict[str, JobVersion] = {}
        self._pins: dict[tuple[str, str], str] = {}  # (server address, model) → version number there
        self._listeners: list[Listener] = []

    # -- listeners -------------------------------------------------------------------------------------
    def watch(self, listener: Listener) -> None:
        """Tells ``listener`` the job's versions now and whenever one more is decided."""
        self._listeners.append(listener)
        used = self.used()
        if used:
            listener.changed(used)

    def used(self) -> dict[str, str]:
        """``{model: content digest}`` of every version the job has decided on."""
        with self._lock:
            return {model: job.content for model, job in self._chosen.items()}

    def _decide(self, model: str, job: JobVersion) -> JobVersion:
        """Keeps the first decision for ``model`` (two threads may check two servers at once) and tells the
        listeners of a new one before any request uses it."""
        with self._lock:
            kept = self._chosen.setdefault(model, job)
        if kept is job:
            used = self.used()
            for listener in self._listeners:
                listener.changed(used)
        return kept

    # -- pinning ---------------------------------------------------------------------------------------
    def check(self, info: ModelInfo, server: Pinnable) -> str:
        """Pins ``info``'s model on ``server`` to the job's version; returns why the server cannot serve it
        ("" when pinned, or when there is nothing to compare: a server that reports no sums to a job
        without a local copy). An ensemble is checked step by step as before (``model_identity``)."""
        model = info.name
        local = self.repository.find(model) if self.repository is not None else None
        if (local or info).platform == "ensemble":
            return version_problem(self.repository, info, server)
        job = self._local(model, local) if local is not None else None
        remote = config_checksums(info.config, model)
        if not remote:
            return version_problem(self.repository, info, server)
        versions = self._versions(model, remote, server)
        if job is None:
            first = next((v for v in versions if v in _folders(remote)), None)
            if first is None:
                return ""
            job = self._decide(model, JobVersion(version_files(remote, first), self._reported(remote, first)))
        match = next((v for v in versions if version_files(remote, v) == job.files), None)
        if match is None:
            return self._refusal(info, server, remote, versions, job, local)
        server.model_versions[model] = match
        with self._lock:
            self._pins[(server.address, model)] = match
        if len(versions) > 1:
            log.info("model %r on server %s: version %s of %s is this job's", model, server.address, match, versions)
        return ""

    def _local(self, model: str, local: ModelInfo) -> JobVersion:
        with self._lock:
            known = self._chosen.get(model)
        if known is not None:
            return known
        sums = file_digests(local)
        return self._decide(model, JobVersion(version_files(sums, local.version), digest(sums)))

    @staticmethod
    def _versions(model: str, remote: dict[str, str], server: Pinnable) -> list[str]:
        """The versions to consider, newest first: the configured pin, else those ready on the server (when it
        cannot say now, those its config has sums for: a request to one that is not ready fails over)."""
        pinned = server.model_versions.get(model)
        if pinned:
            return [str(pinned)]
        try:
            listed = server.ready_versions(model)
        except RequestError:
            listed = []
        listed = listed or list(_folders(remote))
        return sorted(set(listed), key=int, reverse=True)

    @staticmethod
    def _reported(remote: dict[str, str], version: str) -> str:
        """The digest of one version as the server's repository holds it (what a local copy's digest is)."""
        return digest({rel: value for rel, value in remote.items() if _in_version(rel, version)})

    def _refusal(self, info: ModelInfo, server: Pinnable, remote: dict[str, str], versions: list[str],
                 job: JobVersion, local: ModelInfo | None) -> str:
        if local is not None and len(_folders(remote)) == 1:  # one version: the file-by-file line it always had
            problem = version_problem(self.repository, info, server)
            if problem:
                return problem
        served = ", ".join(f"{v} {self._reported(remote, v)}" for v in versions) or "none ready"
        whose = f"the local {local.path}" if local is not None else "the version this job took first"
        return (f"model {info.name!r} on server {server.address} serves no version with the files of {whose} "
                f"({job.digest}); its versions: {served}")

    # -- reports ---------------------------------------------------------------------------------------
    def digest_on(self, address: str, model: str) -> str | None:
        """The digest of what the server at ``address`` answers for ``model`` (None where it was not pinned:
        never asked, or it reports no sums)."""
        with self._lock:
            return self._chosen[model].digest if (address, model) in self._pins else None

    def pinned(self) -> dict[str, dict[str, str]]:
        """``{model: {server address: version number}}``."""
        with self._lock:
            out: dict[str, dict[str, str]] = {}
            for (address, model), version in self._pins.items():
                out.setdefault(model, {})[address] = version
            return out

    def close(self) -> None:
        """The job is done with its versions: listeners are told (a fleet's record of its use goes)."""
        for listener in self._listeners:
            try:
                listener.close()
            except Exception as err:  # noqa: BLE001 - a job's end must not fail over a record it could not remove
                log.warning("could not withdraw the job's model versions: %s: %s", type(err).__name__, err)
