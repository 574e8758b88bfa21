"""Which server a request goes to: the order of a pool's candidates, as rules over what it knows of each server.

The pool (``servers.py``) knows each server's recent mean queue time per model (Triton's statistics, read in
the background every ``refresh_s``; ``server_statistics.queue_ms``). From it:

* **Equal servers take turns.** Servers whose queue time is within :data:`EQUAL_WITHIN_MS` of the best, or at
  most :data:`EQUAL_WITHIN_FACTOR` times it, count as equal and are used in turn (round robin). Identical
  servers under the same load read queue times that differ by tens of percent from one read to the next (each
  is a mean over a couple of seconds of requests): a tolerance tighter than that noise sent each job's every
  request to whichever server happened to read lowest — winner takes all, flipping at each refresh — and a
  server many jobs left at once idled while the others queued.
* **Busier servers get fewer turns, in proportion**: one whose queue time is past that bound gets
  ``bound / queue`` of an equal server's turns (smooth weighted round robin, :class:`Turns`), and one past
  :data:`LAST_RESORT_FACTOR` times the bound is tried only after the others (really overloaded, degraded, or
  shared with other work). Taking every turn from a server as soon as it read busier made all jobs leave it at
  once and come back at once (their reads are of the same server-wide figures): with four GPU servers whose
  host was the limit, shares swung to 0.32 / 0.24 / 0.22 / 0.22 and cards idled while others queued.
* **Turns are counted per model, from a random start.** One counter for every model aliased with the order of
  a job's calls (four models per event against two servers sent each model to one server for good), and every
  job starting at the same server sent the first request of all jobs started together to the same server.

A server that answered nothing between two reads has its figure halved (``server_statistics.queue_ms``): keeping
its last busy reading kept it out of the rotation for as long as the others stayed below that stale figure (a
server every job had left stayed left); halving brings an idle server back within a few reads, without taking
one quiet read (an execution longer than the interval) for an empty queue.

::

    turns = Turns()
    order([("a:1", 0.3), ("b:1", 0.5), ("c:1", 2.6), ("d:1", 9.0)], turns, "m")
    # a and b take turns, c gets half as many, d only when the others fail
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

T = TypeVar("T")

#: servers whose recent queue time is within this of the best (ms) are equal...
EQUAL_WITHIN_MS = 1.0
#: ... or within this factor of it (queue times under load are noisy: see the module docstring)
EQUAL_WITHIN_FACTOR = 2.0
#: a server whose queue time is past this many times the equal bound is a last resort only
LAST_RESORT_FACTOR = 4.0


def equal_bound(best_ms: float) -> float:
    """The queue time up to which a server counts as equal to the best one."""
    return max(best_ms + EQUAL_WITHIN_MS, EQUAL_WITHIN_FACTOR * best_ms)


def weights(queues: Sequence[float]) -> list[float]:
    """Each server's share of turns from its recent queue time: 1 when equal to the best, ``bound / queue`` when
    busier (a server with twice the bound gets half the turns), 0 past :data:`LAST_RESORT_FACTOR` × the bound."""
    if not queues:
        return []
    bound = equal_bound(min(queues))
    return [1.0 if q <= bound else bound / q if q <= LAST_RESORT_FACTOR * bound else 0.0 for q in queues]


def order(servers: Sequence[tuple[T, float]], turns: Turns, model: str,
          key: Callable[[T], Hashable] = lambda server: server) -> list[T]:
    """``servers`` (each with its recent queue time in ms) in the order to try them: the one whose turn it is,
    then the others with turns by their credit, then the last resorts, least busy first (``key``: what names a
    server from one call to the next)."""
    if not servers:
        return []
    shares = weights([queue for _, queue in servers])
    credits = turns.take(model, [key(server) for server, _ in servers], shares)
    ranked = sorted((i for i, w in enumerate(shares) if w > 0), key=lambda i: -credits[i])
    resorts = sorted((i for i, w in enumerate(shares) if w == 0), key=lambda i: servers[i][1])
    return [servers[i][0] for i in ranked + resorts]


class Turns:
    """Smooth weighted round robin per model (as nginx's upstreams take turns): each choice adds every server's
    weight to its credit and charges the chosen one (the highest credit) the sum of the weights, so equal
    servers strictly alternate and a server of half the weight gets every other turn of theirs, without bursts.
    Credits start at random, so that jobs started together do not all begin with the same server (see the module
    docstring). Not thread-safe by itself: the pool calls it under its lock."""

    def __init__(self, seed: int | None = None):
        self._random = random.Random(seed)
        self._credits: dict[str, dict[Hashable, float]] = {}

    def take(self, model: str, keys: Sequence[Hashable], shares: Sequence[float]) -> list[float]:
        """Adds the turn: the credits of ``keys`` after it, the chosen one (highest before the charge) first in
        the ranking the caller makes; its charge is applied after the ranking is read."""
        credits = self._credits.setdefault(model, {})
        now = []
        for key, share in zip(keys, shares):
            credits[key] = credits.get(key, self._random.random()) + share
            now.append(credits[key])
        if any(share > 0 for share in shares):
            chosen = max((i for i, share in enumerate(shares) if share > 0), key=lambda i: now[i])
            credits[keys[chosen]] -= sum(shares)
        return now
