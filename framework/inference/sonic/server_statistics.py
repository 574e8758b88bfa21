"""Triton's per-model statistics as the framework reports them: one definition of "compute time".

``ServerConnection.statistics`` returns, per model, Triton's cumulative counters in nanoseconds
(``queue_ns``, ``compute_input_ns``, ``compute_infer_ns``, ``compute_output_ns``). The job report,
``sonic plan`` and the benchmarks all need the server's compute time from them; summing the three
phases here keeps them agreeing on what it includes (not the queue: that is waiting, not work).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Triton's three execution phases: copying inputs in, running the model, copying outputs out
COMPUTE_KEYS = ("compute_input_ns", "compute_infer_ns", "compute_output_ns")


def compute_ns(stats: Mapping[str, float]) -> float:
    """Nanoseconds the server spent executing one model (input + infer + output), queue excluded.

    Args:
        stats (Mapping[str, float]): one model's counters, as ``ServerConnection.statistics`` gives them or
            as read back from a JSON report (a missing counter counts as 0).
    """
    return float(sum(stats.get(key, 0) for key in COMPUTE_KEYS))


ServerCounters = Mapping[str, Mapping[str, Mapping[str, float]]]


def not_one_server(server_side: ServerCounters, answered: Mapping[str, Mapping[str, Any]],
                   doubts: Mapping[str, str] | None = None) -> dict[str, str]:
    """The addresses whose statistics are not one server's counts of this job, each with why.

    A server counts every request it answered (Triton's success count), so over a job it counts at least the
    requests this job had answered at its address, and its counters never go down while it lives. An address
    that counted fewer, or whose counters went down between two reads (``doubts``, from the server pool),
    reaches several servers — a proxy or load balancer in front of them answers each statistics call from
    whichever server it picks — or its server restarted during the job. Either way its numbers are not the
    server's totals, and the report must not present them as such.

    Args:
        server_side: ``{address: {model: counters since the job began}}`` (``ServerPool.statistics``; a
            fallback server's address ends in `` (fallback)``).
        answered: ``{model: {"answers": {address: requests this job had answered there}, ...}}`` (the client's
            counters).
        doubts: ``{address: why}`` already known (counters that went down).
    """
    found = dict(doubts or {})
    for label, models in server_side.items():
        address = label.removesuffix(" (fallback)")
        for model, counters in models.items():
            mine = int((answered.get(model) or {}).get("answers", {}).get(address, 0))
            theirs = int(counters.get("requests", 0))
            if theirs < mine and address not in found:
                found[address] = (f"it counted {theirs} requests of {model!r} where this job had {mine} answered "
                                  f"there")
    return found


Snapshot = Mapping[tuple[str, str], Mapping[str, float]]  # {(model, version): counters}, as statistics() gives


def queue_ms(before: Snapshot, now: Snapshot, previous: Mapping[str, float] | None = None
             ) -> tuple[dict[str, float], str]:
    """Mean queue time per request (ms) of each model between two reads of one server, and a doubt (empty
    when none): a request count that went down means the address is not one server's (see
    :func:`not_one_server`).

    A model the server answered nothing for in between gets half its ``previous`` figure: a server every client
    had left (its last figure was high) is idle and must come back, while one quiet read alone is no proof of
    that (an execution longer than the interval answers nothing either). Keeping the last busy figure kept such
    a server out of every client's rotation for as long as the others stayed below it.
    """
    queue: dict[str, float] = {}
    quiet: dict[str, float] = {}
    doubt = ""
    for key, counters in now.items():
        previous_counters = before.get(key, {})
        requests = counters["requests"] - previous_counters.get("requests", 0)
        if requests > 0:
            queue[key[0]] = (counters["queue_ns"] - previous_counters.get("queue_ns", 0)) / requests / 1e6
        elif requests == 0:
            quiet[key[0]] = (previous or {}).get(key[0], 0.0) / 2
        else:
            doubt = f"its request count of {key[0]!r} went down between two reads"
    return {**quiet, **queue}, doubt  # another version of a model that answered: its figure wins


def since(baseline: Snapshot, now: Snapshot) -> tuple[dict[str, dict[str, float]], str]:
    """Each model's counters since ``baseline`` (versions summed; models with nothing to say left out), and a
    doubt (empty when none) when a request count went down during the job."""
    per_model: dict[str, dict[str, float]] = {}
    doubt = ""
    for (model, version), values in now.items():
        before = baseline.get((model, version), {})
        delta = {k: v - before.get(k, 0) for k, v in values.items()}
        if delta["requests"] < 0:
            doubt = f"its request count of {model!r} went down during the job"
        if delta["requests"] or delta["failures"]:
            total = per_model.setdefault(model, dict.fromkeys(delta, 0))
            for k, v in delta.items():
                total[k] += v
    return per_model, doubt
