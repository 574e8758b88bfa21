"""The right model or none: whether a server's model is the job's own copy, file by file.

A server may serve a different model under the same name (another version, a colleague's retraining); its
answers would be well-formed and wrong. The server reports the MD5 sums of the model's files in its config
(``model_digest``); they must equal the sums of the job's own repository. This module says why a server's
model is not the job's, in one line that names the server, the model and both digests.
"""

from __future__ import annotations

from typing import Protocol

from ..model_digest import digest, file_digests, mismatch
from ..repository import ModelInfo, ModelRepository, config_checksums
from ..triton_errors import RequestError


class AsksModels(Protocol):
    """What the check needs of a server: its address and the config of each model it serves."""

    address: str

    def model_info(self, model: str) -> ModelInfo: ...


def version_problem(repository: ModelRepository | None, info: ModelInfo, server: AsksModels) -> str:
    """Why the server's ``info`` is not the local repository's model (empty when it is, or when the job has no
    local copy of the model to compare with). An ensemble is the right one when each of its steps is: the
    server runs them, so each is compared in turn."""
    local = repository.find(info.name) if repository is not None else None
    if local is None:
        return ""
    if local.platform == "ensemble":
        for step in dict.fromkeys(s.model_name for s in local.config.ensemble_scheduling.step):
            try:
                problem = version_problem(repository, server.model_info(step), server)
            except RequestError as err:
                problem = f"its step {step!r} cannot be checked: {err.args[0]}"
            if problem:
                return f"ensemble {info.name!r} on server {server.address}: {problem}"
        return ""
    ours = file_digests(local)
    remote = config_checksums(info.config, info.name)
    where = f"model {info.name!r} on server {server.address}"
    if not remote:
        return (f"{where} reports no checksums, so it cannot be shown to be the local {local.path} "
                f"(digest {digest(ours)}); the server's repository needs them: `sonic server checksum DIR`")
    differ = mismatch(local, remote)
    if not differ:
        return ""
    files = ", ".join(f"{rel}: server {theirs}, local {mine or 'missing'}" for rel, (mine, theirs) in differ.items())
    return f"{where} is not the local {local.path}: server digest {digest(remote)}, local {digest(ours)} ({files})"
