"""``sonic bench NAME``: reproducible benchmarks (tables in Markdown/JSON, plots in PNG).

Each benchmark is a module ``sonic_hep.workflows.bench.<name>`` defining ``add_arguments(parser)``
and ``run(args) -> int``; this command discovers them (``--out DIR`` is added for every benchmark)
and imports one only when it runs (see :mod:`._lazy`).
"""

from __future__ import annotations

import argparse

from ._lazy import add_lazy, discover

#: what ``sonic bench --help`` says: how to use it (the discovery above is for developers, not users)
USAGE = """\
Run a reproducible benchmark; each writes its tables (Markdown, JSON) and plots (PNG) to --out DIR
(default: build/bench-NAME, git-ignored) and prints the tables.

examples:
  sonic bench framework --io-events 50000
  sonic bench miniaod --events 200
  sonic bench server --backends python native --in-flight 1 16 64
  sonic bench protodune --scale small --events 3 --out build/bench-protodune-small
  sonic bench scale --workflow miniaod --jobs 1 2 4 8 --servers 1 2 --other-ms 60
  sonic bench gpu-models --batch-sizes 1,16,64,256,1024
  sonic bench network --quick                 # servers a shaped link away (root: network namespaces)

'sonic bench NAME --help' lists the options of one benchmark."""


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="run a benchmark (framework, inference, miniaod, ...)", description=USAGE,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    names = parser.add_subparsers(dest="benchmark", metavar="NAME", required=True)
    for name, module in discover("sonic_hep.workflows.bench"):
        name = name.replace("_", "-")  # gpu_models.py is ``sonic bench gpu-models``, as commands are spelled
        add_lazy(names, name, module, prog=f"sonic bench {name}", entry="run", out_option=True)
