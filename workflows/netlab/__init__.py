"""A network lab: servers and jobs in two network namespaces joined by a shaped link (rate, round trip,
jitter, loss), for tests and benchmarks of SONIC over a network rather than loopback. See ``lab.py``."""

from .lab import NetworkLab
from .link import Link
from .namespaces import LabRefused, sweep_leftovers

__all__ = ["LabRefused", "Link", "NetworkLab", "sweep_leftovers"]
