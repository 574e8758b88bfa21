"""``sonic bench NAME``: reproducible benchmarks (tables in Markdown/JSON, plots in PNG).

Each benchmark is a module ``sonic_hep.workflows.bench.<name>`` defining ``add_arguments(parser)``
and ``run(args) -> int``; this command discovers them (``--out DIR`` is added for every benchmark).
"""

from __future__ import annotations

import argparse

from ._lazy import add_lazy, discover


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="run a benchmark (framework, inference, miniaod, ...)", description=__doc__)
    names = parser.add_subparsers(dest="benchmark", metavar="NAME", required=True)
    for name, module in discover("sonic_hep.workflows.bench"):
        add_lazy(names, name, module, prog=f"sonic bench {name}", entry="run", out_option=True)
