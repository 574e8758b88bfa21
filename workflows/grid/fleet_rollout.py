"""Rolling a new version of a model across a live fleet: every server serves the old and the new version side by
side until no job uses the old one, so no request fails and no job mixes versions.

::

    sonic fleet update FLEET demo_mlp --from /shared/models-v2/demo_mlp   # returns once every server serves it
    sonic fleet status FLEET      # the versions of each server, and how many jobs use each version

**The record.** ``FLEET/models/<model>.json`` lists the model's versions in the order they were rolled out, each
with the number the servers serve it under, its folder and the digest of its files
(``model_digest.version_digest``); the last one is *current*. The first is the version the fleet started with.
``sonic fleet update`` (:func:`roll`) appends one after checking that the folder holds the model with the same
inputs, outputs, platform and batch size and that its declared checksums are right; rolling out files that
are already a version of the record makes that version current again (a roll-back) under its old number.

**Each server job** (:class:`Reconciler`, at every heartbeat, and once before it first registers so that a
server joining mid-roll serves what the others serve) makes its server serve (``serving/model_versions.py``):

* the current version, loaded beside the others;
* every older version that a live job uses: jobs record the digest of each version they take before their first
  request of it, and renew that record every heartbeat while they run (``serving/fleet_use.py``);
* an older version nobody uses, only until it has been unused for ``ttl_s`` in a row (a job that just took it
  may not have been read yet), then it is unloaded.

So a job keeps the version it started with to its end: its client pins that version's number on every server
(``sonic/version_pins.py``). A new job takes the current version: a job without a local copy of the model takes
the newest version ready; a job with one takes the version whose files are its copy's (the project's rule that
the job's own copy is the truth), so it takes the new version once its repository has it. A server that cannot
load a version keeps serving what it served, its entry says why (``sonic fleet status``) and ``sonic fleet
update`` exits 1 naming it; it tries again when the versions it should serve change. After such a failure
Triton's own server-wide readiness stays false, so a server job judges its health by the readiness of each
version it serves.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...framework.errors import InferenceError
from ...framework.inference import ModelRepository
from ...framework.inference.serving import (VersionSource, interface_problem, jobs_per_version, ready_versions,
                                            serve_versions, source_of)
from .errors import GridError
from .records import read_json, write_json

log = logging.getLogger(__name__)

ROLLOUTS = "models"


@dataclass
class RolledVersion:
    """One version of a model in a fleet's record (see the module docstring)."""

    number: int
    folder: str
    source_version: int
    digest: str
    rolled: float = field(default_factory=time.time)

    @classmethod
    def of(cls, source: VersionSource) -> RolledVersion:
        return cls(source.number, source.folder, source.source_version, source.digest)

    def source(self) -> VersionSource:
        return VersionSource(self.number, self.folder, self.source_version, self.digest)


@dataclass
class Rollout:
    """A model's versions in a fleet, oldest first; the last is current."""

    model: str
    versions: list[RolledVersion]

    @property
    def current(self) -> RolledVersion:
        return self.versions[-1]

    def number_of(self, digest: str) -> int | None:
        return next((v.number for v in self.versions if v.digest == digest), None)


def record_path(fleet: str | os.PathLike, model: str) -> Path:
    return Path(fleet) / ROLLOUTS / f"{model}.json"


def read_rollouts(fleet: str | os.PathLike) -> dict[str, Rollout]:
    """Every model's record (a file that cannot be read is skipped with a warning: the others still count)."""
    out = {}
    for path in sorted((Path(fleet) / ROLLOUTS).glob("*.json")):
        try:
            data = read_json(path)
            rollout = Rollout(data["model"], [RolledVersion(**v) for v in data["versions"]])
            if not rollout.versions:
                raise ValueError("no version")
        except (GridError, KeyError, TypeError, ValueError) as err:
            log.warning("fleet record %s skipped: %s", path, err)
            continue
        out[rollout.model] = rollout
    return out


def roll(fleet: Any, model: str, folder: str | os.PathLike) -> tuple[Rollout, RolledVersion, str]:
    """Makes the model folder ``folder`` the current version of ``model`` in ``fleet`` (a :class:`~.fleet.Fleet`);
    returns the record, the version and what happened: "new", "back" (an earlier version made current again)
    or "current" (nothing to do).

    Raises:
        GridError: one line naming what to fix (the fleet's model control, the model, the folder, a checksum, an
            input or output that differs).
    """
    spec = fleet.spec
    if spec.model_control != "explicit":
        raise GridError(f"fleet {fleet.directory} runs its servers with --model-control {spec.model_control}: they "
                        f"load no new version; start the fleet with --model-control explicit (the default)")
    if spec.models is not None and model not in spec.models:
        raise GridError(f"fleet {fleet.directory} does not serve {model!r} (it serves {', '.join(spec.models)})")
    try:
        served, original = source_of(ModelRepository(spec.repository).get(model).path, verify=False)
    except InferenceError as err:
        raise GridError(f"fleet {fleet.directory}: {str(err).splitlines()[0]}") from None
    try:
        new, source = source_of(folder)
    except InferenceError as err:
        raise GridError(f"--from {folder}: {str(err).splitlines()[0]}") from None
    if new.name != model:
        raise GridError(f"--from {folder} holds model {new.name!r}, not {model!r} (a version folder's parent is the "
                        f"model folder, named after the model)")
    problem = interface_problem(served, new)
    if problem:
        raise GridError(f"--from {folder} cannot be a version of {model!r}: {problem}")
    path = record_path(fleet.directory, model)
    rollout = read_rollouts(fleet.directory).get(model) or Rollout(model, [RolledVersion.of(original)])
    version = RolledVersion.of(source)
    known = next((v for v in rollout.versions if v.digest == version.digest), None)
    if known is rollout.current:
        return rollout, known, "current"
    if known is not None:
        rollout.versions.remove(known)
        known.rolled, version, happened = time.time(), known, "back"
    else:
        version.number, happened = max(v.number for v in rollout.versions) + 1, "new"
    rollout.versions.append(version)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, asdict(rollout))
    return rollout, version, happened


def versions_to_serve(rollout: Rollout, served: Iterable[int], used: set[str], idle_since: dict[int, float],
                      now: float, grace_s: float) -> set[int]:
    """The rule of the module docstring: the numbers a server serves now. ``used`` holds the digests live jobs
    use; ``idle_since`` (number → when it was first seen unused while served) is kept up to date here."""
    served = set(served)
    keep = {rollout.current.number}
    for version in rollout.versions[:-1]:
        number = version.number
        if version.digest in used:
            idle_since.pop(number, None)
            keep.add(number)
        elif number in served:
            if now - idle_since.setdefault(number, now) < grace_s:
                keep.add(number)
        else:
            idle_since.pop(number, None)
    return keep


class Reconciler:
    """What one server job does about the fleet's records (see the module docstring).

    A load may take longer than a server's entry lives without a heartbeat (a large model on 16 GPU instances):
    the server job runs :meth:`step_soon` in its heartbeat loop, so the load runs on a thread of its own while
    the entry stays fresh and the old versions keep serving.

    Args:
        fleet: the fleet directory.
        server: the job's started :class:`~sonic_hep.framework.inference.serving.server.TritonServer`.
        grace_s: how long an older version stays after the last job using it is gone (the fleet's ``ttl_s``).
        clock: seconds since the epoch (job records carry such times; tests pass a fake).
    """

    def __init__(self, fleet: str | os.PathLike, server: Any, grace_s: float, clock: Callable[[], float] = time.time):
        self.fleet, self.server, self.grace_s, self.clock = Path(fleet), server, grace_s, clock
        repository = server.repository
        #: per model, what the server serves: version number → where it comes from
        self.served: dict[str, dict[int, VersionSource]] = {}
        for model in server.served:  # as the server started: the repository's version, verified then
            version = source_of(repository.get(model).path, verify=False)[1]
            self.served[model] = {version.number: version}
        self.errors: dict[str, str] = {}  # model → why the versions asked for could not be served
        self._failed: dict[str, tuple[int, ...]] = {}  # model → the numbers that failed (not retried as they are)
        self._idle: dict[str, dict[int, float]] = {}
        self._lock = threading.Lock()  # the heartbeat loop reads what a background step changes
        self._background: threading.Thread | None = None
        self._changed_since = False  # a background step changed what the server serves since step_soon last said

    def step(self) -> bool:
        """Serves what the records ask for now; True when something was loaded or unloaded. Never raises: a
        record that cannot be read, or a server that refuses, must not end a server that serves."""
        try:
            return self._step()
        except Exception as err:  # noqa: BLE001 - see above
            log.warning("fleet %s: the model versions were not brought up to date: %s: %s", self.fleet,
                        type(err).__name__, err)
            return False

    def step_soon(self) -> bool:
        """Starts a :meth:`step` on its own thread unless one still runs; True when an earlier one changed what
        the server serves since the last call (its entry's models are then read again)."""
        with self._lock:
            changed, self._changed_since = self._changed_since, False
            if self._background is None or not self._background.is_alive():
                self._background = threading.Thread(target=self._step_behind, name="fleet-versions", daemon=True)
                self._background.start()
        return changed

    def _step_behind(self) -> None:
        if self.step():
            with self._lock:
                self._changed_since = True

    def _step(self) -> bool:
        rollouts = {m: r for m, r in read_rollouts(self.fleet).items() if m in self.served}
        if not rollouts:
            return False
        used = jobs_per_version(self.fleet, self.clock())
        now, changed = self.clock(), False
        for model, rollout in rollouts.items():
            served = self.served[model]
            numbers = versions_to_serve(rollout, served, set(used.get(model, {})), self._idle.setdefault(model, {}),
                                        now, self.grace_s)
            if numbers == set(served) or self._failed.get(model) == tuple(sorted(numbers)):
                if numbers == set(served):
                    self._settle(model, "")
                continue
            sources = {v.number: v.source() for v in rollout.versions if v.number in numbers}
            try:
                serve_versions(self.server, model, [sources[n] for n in sorted(numbers)])
            except (InferenceError, OSError) as err:
                self._settle(model, " ".join(str(err).split()), tuple(sorted(numbers)))
                log.warning("fleet %s: %s", self.fleet, self.errors[model])
                continue
            log.info("model %r: serving versions %s (was %s)", model, sorted(numbers), sorted(served))
            with self._lock:
                self.served[model] = sources
            self._settle(model, "")
            changed = True
        return changed

    def _settle(self, model: str, error: str, failed: tuple[int, ...] = ()) -> None:
        with self._lock:
            if error:
                self.errors[model], self._failed[model] = error, failed
            else:
                self.errors.pop(model, None)
                self._failed.pop(model, None)

    def versions(self) -> dict[str, dict[str, str]]:
        """``{model: {version: digest}}`` of what the server serves (for its entry)."""
        with self._lock:
            return {model: {str(n): source.digest for n, source in sorted(versions.items())}
                    for model, versions in self.served.items()}

    def problems(self) -> dict[str, str]:
        """``{model: why}`` of the models whose versions asked for could not be served (for its entry)."""
        with self._lock:
            return dict(self.errors)

    def ready(self) -> bool:
        """Whether every version the server serves is ready, each asked for itself: Triton's server-wide
        readiness is false while a version loads beside the others, and stays false after one failed to load,
        although the server serves everything it should then."""
        try:
            ready = ready_versions(self.server)
        except InferenceError:
            return False
        with self._lock:
            return all({str(n) for n in versions} <= set(ready.get(model, []))
                       for model, versions in self.served.items())


def wait_for_version(fleet: Any, model: str, number: int, since: float, timeout: float, poll_s: float = 0.5,
                     say: Callable[[str], None] = print) -> None:
    """Waits until every live server of ``fleet`` serves version ``number`` of ``model`` (rolled out at ``since``,
    seconds since the epoch), saying each one that does as it does.

    Raises:
        GridError: a server could not load it (naming the server and why), or ``timeout`` passed.
    """
    deadline, told = time.monotonic() + timeout, set()
    settled = since + 2 * fleet.spec.heartbeat_s  # an entry written after this comes from a step that read the record
    while True:
        live = [m for m in fleet.members() if m.entry is not None and not m.expired and not m.stopping]
        for member in live:
            error = member.entry.version_errors.get(model)
            if error and member.entry.heartbeat > settled and str(number) not in member.entry.versions.get(model, {}):
                raise GridError(f"server {member.name} ({member.entry.address}) did not load version {number} of "
                                f"{model!r}: {error}")
            if str(number) in member.entry.versions.get(model, {}) and member.name not in told:
                told.add(member.name)
                say(f"{member.name}: {member.entry.address} serves {model} versions "
                    f"{', '.join(member.entry.versions[model])}")
        if live and all(str(number) in m.entry.versions.get(model, {}) for m in live):
            return
        if time.monotonic() > deadline:
            missing = [m.name for m in live if str(number) not in m.entry.versions.get(model, {})]
            raise GridError(f"after {timeout:.0f} s, servers {missing or 'none live'} of {fleet.directory} do not "
                            f"serve version {number} of {model!r} yet; `sonic fleet status {fleet.directory}` shows why")
        time.sleep(poll_s)


def describe(fleet: str | os.PathLike) -> list[dict[str, Any]]:
    """Per rolled model, each version with its number, digest, folder, whether it is current and how many live
    jobs use it (``sonic fleet status``)."""
    used = jobs_per_version(fleet)
    out = []
    for model, rollout in read_rollouts(fleet).items():
        out.append({"model": model, "versions": [
            {"version": v.number, "digest": v.digest, "folder": str(Path(v.folder) / str(v.source_version)),
             "current": v is rollout.current, "jobs": used.get(model, {}).get(v.digest, 0)}
            for v in rollout.versions]})
    return out
