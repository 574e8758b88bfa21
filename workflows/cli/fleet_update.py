"""``sonic fleet update DIR MODEL --from FOLDER``: rolls a new version of a model across a live fleet, and what
``sonic fleet status`` shows of the versions (the rule: ``workflows/grid/fleet_rollout.py``).

Every server loads the new version beside the old one at its next heartbeat; jobs already running keep the
version they started with, new jobs take the new one, and each old version is unloaded once no job uses it.
The command returns when every live server serves the new version (exit 1 naming a server that could not load
it), or at once with ``--no-wait``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ..grid.fleet import Fleet
from ..grid.fleet_rollout import describe, roll, wait_for_version


def update(args: argparse.Namespace) -> int:
    fleet = Fleet(args.directory)
    started = time.time()
    rollout, version, happened = roll(fleet, args.model, args.source)
    older = [v.number for v in rollout.versions[:-1]]
    what = {"new": "is now current", "back": "is current again", "current": "was already current"}[happened]
    print(f"fleet {fleet.directory}: {args.model} version {version.number} ({version.digest}, "
          f"{Path(version.folder) / str(version.source_version)}) {what}; servers load it beside versions "
          f"{older or 'none'} at their next heartbeat and unload each older version once no job uses it",
          file=sys.stderr)
    if not args.no_wait:
        wait_for_version(fleet, args.model, version.number, since=started, timeout=args.timeout)
    return 0


def add_update(actions: Any) -> None:
    """Adds ``update`` to ``sonic fleet``'s actions."""
    p = actions.add_parser("update", help="roll a new version of a model across the live fleet: served beside the "
                                          "old one until no job uses the old one")
    p.add_argument("directory", metavar="DIR", help="the fleet directory")
    p.add_argument("model", metavar="MODEL", help="a model the fleet serves")
    p.add_argument("--from", dest="source", required=True, metavar="FOLDER",
                   help="the new version's model folder (config.pbtxt and a version folder; the highest is taken), "
                        "on a filesystem the server jobs read")
    p.add_argument("--no-wait", action="store_true", help="return at once instead of waiting for every live server")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for every live server (default 300)")
    p.set_defaults(func=update)


def served(entry: Any) -> str:
    """What one server serves, as ``sonic fleet status`` shows it: each model with its versions, and why a
    version asked for could not be served."""
    text = ", ".join(f"{model} ({', '.join(entry.versions[model])})" if entry.versions.get(model) else model
                     for model in sorted(entry.models))
    problems = "; ".join(f"{model}: {why}" for model, why in sorted(entry.version_errors.items()))
    return text + (f"; NOT SERVED: {problems}" if problems else "")


def version_lines(directory: str | Path) -> list[str]:
    """One line per version of each model rolled out in the fleet: current or not, and the jobs using it."""
    lines = []
    for model in describe(directory):
        for v in model["versions"]:
            jobs = f"{v['jobs']} job{'s' * (v['jobs'] != 1)}"
            lines.append(f"  model {model['model']} version {v['version']}{' (current)' if v['current'] else ''}: "
                         f"{v['digest']} from {v['folder']}, used by {jobs}")
    return lines
