"""``sonic data generate NAME``: generate input events for a workflow (miniaod, protodune, exatrkx ...).

Each generator is a module ``sonic_hep.data.<name>.generate`` defining ``add_arguments(parser)`` and
``main(args) -> int``; this command discovers them and imports one only when it runs (see :mod:`._lazy`).
"""

from __future__ import annotations

import argparse

from ._lazy import add_lazy, discover

#: what ``sonic data --help`` says: how to use it (the discovery above is for developers, not users)
USAGE = """\
Generate input events for a workflow as a ROOT file (nothing is downloaded: the events are simulated here).

examples:
  sonic data generate miniaod --events 50 --output miniaod.root --seed 1
  sonic data generate protodune --events 10 --output pdsp.root --scale small
  sonic data generate exatrkx --events 20 --output exatrkx.root

'sonic data generate WORKFLOW --help' lists the options of one generator."""


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("data", help="generate input events", description=USAGE,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    generate = actions.add_parser("generate", help="generate events for a workflow", description=USAGE,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    workflows = generate.add_subparsers(dest="workflow", metavar="WORKFLOW", required=True)
    for name, module in discover("sonic_hep.data", suffix=".generate"):
        add_lazy(workflows, name, module, prog=f"sonic data generate {name}", entry="main")
