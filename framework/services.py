"""Framework services: job-wide helpers that modules ask for by name (``self.service("inference")``).

A service is configured in the ``services:`` section and started only when a module's ``requires`` names
it (a configured service no module uses is checked, so a typo is still an error, but not started: a job
without inference starts no Triton server). It lives for the job (``begin_job``/``end_job``) and may add a section to the
timing report. The framework core knows services only through this table, so the scheduler never
depends on inference or any other service.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

from .errors import ConfigError, did_you_mean

#: service name → "module:Class"; third parties may add entry points in group ``sonic_hep.services``
BUILTIN = {"inference": "sonic_hep.framework.inference.service:InferenceService"}


class Service:
    """Base class of services.

    Args:
        config (dict): the service's section of the configuration.
    """

    name: ClassVar[str] = ""

    def __init__(self, config: dict[str, Any]):
        self.config = config

    def begin_job(self) -> None:
        """Called before the first event (start servers, open sessions)."""

    def end_job(self) -> None:
        """Called after the last event, also when the job fails (stop what was started)."""

    def report(self) -> dict[str, Any] | None:
        """A section for the timing report (``{"table": text, ...}``), or None."""
        return None

    def provenance(self) -> dict[str, Any] | None:
        """What the output file records of how this service produced the events (JSON-able, no secrets),
        or None."""
        return None


def _known() -> dict[str, str]:
    import importlib.metadata

    known = dict(BUILTIN)
    for entry in importlib.metadata.entry_points(group="sonic_hep.services"):
        known[entry.name] = entry.value
    return known


def service_class(name: str) -> type[Service]:
    """The class of service ``name``, or a ConfigError listing the known services."""
    known = _known()
    if name not in known:
        raise ConfigError(f"unknown service {name!r}{did_you_mean(name, known)}; known: {sorted(known)}",
                          key=f"services.{name}")
    module_name, _, attr = known[name].partition(":")
    return getattr(importlib.import_module(module_name), attr)
