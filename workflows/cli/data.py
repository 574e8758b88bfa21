"""``sonic data generate NAME``: generate input events for a workflow (miniaod, protodune, exatrkx ...).

Each generator is a module ``sonic_hep.data.<name>.generate`` defining ``add_arguments(parser)`` and
``main(args) -> int``; this command discovers them.
"""

from __future__ import annotations

import argparse

from ._lazy import add_lazy, discover


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("data", help="generate input events", description=__doc__)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    generate = actions.add_parser("generate", help="generate events for a workflow")
    workflows = generate.add_subparsers(dest="workflow", metavar="WORKFLOW", required=True)
    for name, module in discover("sonic_hep.data", suffix=".generate"):
        add_lazy(workflows, name, module, prog=f"sonic data generate {name}", entry="main")
