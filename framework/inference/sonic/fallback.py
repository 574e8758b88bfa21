"""The job's local fallback server: whether it may start, starting it once, and saying when and why it did.

A job that names its servers (``--server``, ``services.inference.servers``, ``--fleet``) expects them to
serve it. On a grid site a typo in an address, or a TLS server reached without client TLS settings, must not
turn every job quietly into a CPU server of its own on the worker node. ``services.inference.fallback``:

==========  ===============================================================================================
``auto``    (default) a local server only when the job names no server: it is then the job's server
``always``  also when no named server can serve a model, at start or mid-run (CMSSW's TritonService fallback)
``never``   never: a model no named server can serve fails the job; a job that names no server fails at once
==========  ===============================================================================================

``true`` and ``false``, the setting's values before it had three, read as ``always`` and ``never``. A site
that forbids local servers on its worker nodes sets ``SONIC_HEP_FALLBACK=never`` in their environment: it
wins over every job's configuration, and a job that would need a fallback fails naming the variable.

A fallback that is taken is recorded (when, for which model, and what every server said at that moment)
and shown in the end-of-job report and the timing JSON (``SonicClient.statistics``), never only logged.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError, InferenceError
from ..repository import ModelRepository
from ..serving.server_options import fallback_server
from ..triton_errors import NoServerError

log = logging.getLogger(__name__)

POLICIES = ("auto", "always", "never")
#: set on a site's worker nodes to forbid local servers whatever a job's configuration says
SITE_ENV = "SONIC_HEP_FALLBACK"
KEY = "services.inference.fallback"


def policy_of(value: Any) -> str:
    """The setting as one of :data:`POLICIES` (``True``/``False`` as ``always``/``never``).

    Raises:
        ValueError: any other value, worded for a configuration key.
    """
    if isinstance(value, bool):
        return "always" if value else "never"
    if isinstance(value, str) and value.lower() in POLICIES:
        return value.lower()
    raise ValueError(f"must be one of {', '.join(POLICIES)} (or true/false), not {value!r}")


@dataclass(frozen=True)
class FallbackPolicy:
    """Whether this job may start a local server (see the module docstring).

    Args:
        setting: ``services.inference.fallback``.
        named: whether the job names its servers (addresses or a fleet).
        site: the value of ``SONIC_HEP_FALLBACK`` ("" when unset).
    """

    setting: str
    named: bool
    site: str = ""

    @classmethod
    def of(cls, setting: Any, named: bool, environ: Mapping[str, str] = os.environ) -> FallbackPolicy:
        """The policy for a job; a bad ``SONIC_HEP_FALLBACK`` is one line naming the variable.

        Raises:
            ConfigError: ``SONIC_HEP_FALLBACK`` set to anything but ``never`` (or empty).
        """
        site = environ.get(SITE_ENV, "").strip().lower()
        if site not in ("", "never"):
            raise ConfigError(f"{SITE_ENV}={environ[SITE_ENV]!r}: a site may only forbid local fallback servers "
                              f"({SITE_ENV}=never) or leave the choice to each job (unset)")
        return cls(policy_of(setting), named, site)

    @property
    def allowed(self) -> bool:
        return not self.site and (self.setting == "always" or (self.setting == "auto" and not self.named))

    def refusal(self) -> str:
        """Why no local server may start, for the end of a "no server can run model" line ("" when one may)."""
        if self.site:
            return f"fallback: forbidden on this site ({SITE_ENV}=never)"
        if self.setting == "never":
            return f"fallback: off ({KEY}: never)"
        if self.setting == "auto" and self.named:
            return (f"fallback: off (the job names its servers; {KEY}: always would start a local CPU server "
                    f"when they cannot serve)")
        return ""

    def check_start(self) -> None:
        """A job that names no server and may not start one has nothing to run on: one line, before any event.

        Raises:
            ConfigError: naming what to give.
        """
        if not self.named and not self.allowed:
            why = f"{SITE_ENV}=never forbids local servers on this site" if self.site else f"{KEY} is never"
            raise ConfigError(f"no server to run on: the job names none and {why}; give --server HOST:PORT, "
                              f"services.inference.servers or --fleet DIR", key=KEY)


class LocalFallback:
    """The local CPU server of one job (as CMSSW's TritonService starts one), started at most once.

    Args:
        repository: the job's model repository (what the server serves); None: no fallback is possible.
        allowed: what the policy says.
        refusal: why it may not start, for messages (:meth:`FallbackPolicy.refusal`).
    """

    def __init__(self, repository: ModelRepository | None, allowed: bool, refusal: str = ""):
        self.repository = repository
        self.allowed = allowed and repository is not None
        self.refusal = refusal or "fallback: off"
        self.server: Any = None
        self.error: BaseException | None = None
        self.began = time.monotonic()
        #: each fallback taken: ``{"model", "after_s", "why"}`` (the report's and the timing JSON's)
        self.taken: list[dict[str, Any]] = []

    def has(self, model: str) -> bool:
        """Whether the local repository has ``model`` (the fallback could serve it)."""
        return self.repository is not None and model in self.repository.names()

    def start(self, options: Mapping[str, Any], model: str, why: str) -> Any:
        """Starts the server with ``options`` (``services.inference.fallback_server``: ``ServerOptions``' fields)
        once (a failed start is not tried again), and records why it was needed.

        Raises:
            NoServerError: a start that failed before, or no local repository.
            InferenceError: the server could not start now.
        """
        if self.error is not None:
            raise NoServerError(f"the local fallback server could not start: {self.error}")
        if self.repository is None:
            raise NoServerError("no local fallback server: the job has no model repository "
                                "(services.inference.repository)")
        from ..serving.server import TritonServer

        after = time.monotonic() - self.began
        log.warning("starting a local fallback Triton server on %s after %.1f s%s: %s",
                    [str(p) for p in self.repository.paths], after, f" for {model!r}" if model else "", why)
        try:
            self.server = TritonServer(self.repository, fallback_server(options)).start()
        except InferenceError as err:
            self.error = err
            raise
        self.taken.append({"model": model, "after_s": round(after, 3), "why": why})
        return self.server

    def describe(self, model: str) -> list[str]:
        """The fallback's part of a "no server can run model" line."""
        if not self.allowed:
            return [self.refusal if self.repository is not None else "fallback: no local repository"]
        if not self.has(model):
            return [f"fallback: the local repository {[str(p) for p in self.repository.paths]} has no {model!r}"]
        return []

    def report_lines(self) -> list[str]:
        """One line per fallback taken, for the end-of-job report."""
        where = self.server.grpc_url if self.server is not None else "?"
        return [f"fallback: local server {where} started {t['after_s']:.1f} s into the job"
                f"{' for ' + repr(t['model']) if t['model'] else ''}: {t['why']}" for t in self.taken]
