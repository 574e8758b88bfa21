"""What a server pool knows about one server: its connection, breaker, models, queue times and standing.

Kept apart from the pool (``servers.py``) so that the pool's rules read as rules over these fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .breaker import Breaker
from .connection import ServerConnection


@dataclass
class ServerState:
    """What the pool knows about one server."""

    connection: ServerConnection
    breaker: Breaker = field(default_factory=Breaker)
    models: dict[str, str] = field(default_factory=dict)  # ready model → version
    reason: str = ""  # why it is down
    checked: float = 0.0  # when it was last probed
    queue_ms: dict[str, float] = field(default_factory=dict)  # recent mean queue time per model
    last_stats: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    baseline: dict[tuple[str, str], dict[str, float]] | None = None  # statistics when the job began using it
    #: why its statistics are not one server's (a counter went down: several servers behind one address, or a
    #: restart), for the report (``server_statistics.not_one_server``); "" when nothing says so
    doubt: str = ""
    fallback: bool = False
    retired: bool = False  # discovered, and no longer named by discovery: chosen for nothing new
    refused: dict[str, str] = field(default_factory=dict)  # model → why this server may not serve it
    verified: set[str] = field(default_factory=set)  # models whose version was checked on this server

    @property
    def healthy(self) -> bool:
        """In rotation: its breaker is closed and discovery still names it."""
        return self.breaker.usable() and not self.retired
