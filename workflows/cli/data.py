"""``sonic data generate NAME``: generate input events for a workflow (miniaod, protodune, exatrkx ...).

Each generator is a module ``sonic_hep.data.<name>.generate`` defining ``add_arguments(parser)`` and
``main(args) -> int``; this command discovers them.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import pkgutil

from ... import data


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("data", help="generate input events", description=__doc__)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    generate = actions.add_parser("generate", help="generate events for a workflow")
    workflows = generate.add_subparsers(dest="workflow", metavar="WORKFLOW", required=True)
    for info in sorted(pkgutil.iter_modules(data.__path__), key=lambda i: i.name):
        if not info.ispkg:
            continue
        try:
            spec = importlib.util.find_spec(f"{data.__name__}.{info.name}.generate")
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            continue
        module = importlib.import_module(f"{data.__name__}.{info.name}.generate")
        doc = (module.__doc__ or "").strip().splitlines()
        child = workflows.add_parser(info.name, help=doc[0] if doc else "", description=module.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(child)
        child.set_defaults(func=module.main)

