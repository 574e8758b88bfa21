"""``sonic bench NAME``: reproducible benchmarks (tables in Markdown/JSON, plots in PNG).

Each benchmark is a module ``sonic_hep.workflows.bench.<name>`` defining ``add_arguments(parser)``
and ``run(args) -> int``; this command discovers them, so adding a benchmark needs no edit here.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil

from .. import bench


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="run a benchmark (framework, inference, miniaod, ...)", description=__doc__)
    names = parser.add_subparsers(dest="benchmark", metavar="NAME", required=True)
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{bench.__name__}.{info.name}")
        doc = (module.__doc__ or "").strip().splitlines()
        child = names.add_parser(info.name, help=doc[0] if doc else "", description=module.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        child.add_argument("--out", default=f"bench-{info.name}", metavar="DIR",
                           help="directory for the tables (Markdown, JSON) and plots (PNG)")
        module.add_arguments(child)
        child.set_defaults(func=module.run)
