"""A server leaving its fleet (scale-down, ``sonic fleet stop``, SIGTERM): no new request, the ones it holds
answered, then a stop within a bound, its work folder removed.

The order (``fleet_member`` removes the entry first, then calls :func:`drain_and_stop`):

1. **no entry**: clients re-read the fleet directory at their next refresh (``ServerPool.refresh_s``, 2 s) and
   retire the server: they choose it for nothing new, and the requests they already sent finish;
2. **``drain_s``** passes, so that every client has had that refresh;
3. **quiet**: the server is watched (its metrics) until nothing is queued and no request has completed for
   :data:`QUIET_S`, for ``stop_timeout_s`` at most: a client that was slow to notice gets its answers rather
   than a stopping server's refusal (Triton answers NOT_FOUND once it stops a model; clients fail those over,
   which is what the quiet wait makes rare);
4. **stop**: SIGTERM; Triton lets every execution it started finish, then tears its instances down, one
   after the other, within the bound ``server_stop.py`` sets from their number; exit code 0 removes the work
   folder.

While it leaves, the member writes ``jobs/NNNN/leaving.json`` with the time by which it will be gone, so that
``sonic fleet stop`` waits for a large server's teardown instead of cancelling it half-way.
"""

from __future__ import annotations

import logging
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ...framework.inference.serving import stop_bound_s
from .records import read_json, write_json

if TYPE_CHECKING:
    from ...framework.inference.serving import TritonServer

log = logging.getLogger(__name__)

LEAVING_FILE = "leaving.json"
#: how long a leaving server must have had nothing queued and completed nothing before it is stopped
QUIET_S = 1.0
POLL_S = 0.2
#: Triton's counters of the requests it completed, and its gauge of those waiting to execute
_COMPLETED = re.compile(r"^nv_inference_request_(?:success|failure)\{[^}]*\} (\S+)$", re.MULTILINE)
_PENDING = re.compile(r"^nv_inference_pending_request_count\{[^}]*\} (\S+)$", re.MULTILINE)


def activity(metrics_url: str) -> tuple[float, float] | None:
    """``(requests completed so far, requests waiting to execute)`` from the server's metrics; None when it does
    not answer."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=2) as response:
            text = response.read().decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return None
    return sum(float(v) for v in _COMPLETED.findall(text)), sum(float(v) for v in _PENDING.findall(text))


def wait_quiet(read: Callable[[], tuple[float, float] | None], limit_s: float, quiet_s: float = QUIET_S,
               clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> tuple[bool, float]:
    """Waits until ``read`` shows nothing queued and the same number completed for ``quiet_s``; returns
    whether it got quiet within ``limit_s`` and how many requests completed meanwhile."""
    start = clock()
    first = last = read()
    since = start
    while clock() - start < limit_s:
        now = read()
        if now is None:  # not answering: nothing more to wait for here (stop() tells what happened)
            return False, 0.0
        if last is None or now[0] != last[0] or now[1] > 0:
            since = clock()
        elif clock() - since >= quiet_s:
            return True, now[0] - (first or now)[0]
        last = now
        sleep(POLL_S)
    return False, (last or (0.0, 0.0))[0] - (first or (0.0, 0.0))[0]


def drain_and_stop(server: TritonServer, drain_s: float, stop_timeout_s: float, job_folder: Path,
                   say: Callable[[str], None] = print) -> int | None:
    """Steps 2 to 4 of the module docstring for a server whose entry is already gone; returns its exit code."""
    by = time.time() + drain_s + stop_timeout_s + stop_bound_s(server.exit_timeout)
    write_json(job_folder / LEAVING_FILE, {"by": by})
    left = activity(server.metrics_url)
    time.sleep(drain_s)
    quiet, _ = wait_quiet(lambda: activity(server.metrics_url), stop_timeout_s)
    now = activity(server.metrics_url)
    answered = f"{now[0] - left[0]:.0f}" if left and now else "?"
    say(f"drained: {'quiet' if quiet else 'still busy after ' + format(stop_timeout_s, '.0f') + ' s'}, "
        f"{answered} requests answered after it left the directory")
    asked = time.monotonic()
    code = server.stop()
    say(f"Triton server stopped in {time.monotonic() - asked:.1f} s, exit code {code}"
        f"{', work folder removed' if not server.workdir.exists() else ', work folder kept: ' + str(server.workdir)}")
    return code


def leaving_by(job_folder: Path) -> float:
    """When a leaving server job said it will be gone (0 when it did not say)."""
    record = read_json(job_folder / LEAVING_FILE)
    try:
        return float(record["by"]) if record else 0.0
    except (KeyError, TypeError, ValueError):
        return 0.0

