"""``sonic graph CONFIG``: the module DAG in execution order, written as DOT and PNG.

The PNG is drawn by Graphviz's ``dot`` when it is installed (modules coloured by kind, product keys on
the edges, a legend); without it, by matplotlib in columns by dependency depth. ``--no-graphviz``
forces the matplotlib drawing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ...framework import config as cfgmod
from ...framework import graph_drawing as drawing
from ...framework.atomic import PendingText
from ...framework.process import Process
from .run import add_process_arguments, overrides_from


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("graph", help="print the module order and draw the DAG", description=__doc__)
    add_process_arguments(parser)
    parser.add_argument("--dot", metavar="FILE", help="DOT output (default: <config name>.dot)")
    parser.add_argument("--png", metavar="FILE", help="PNG output (default: <config name>.png)")
    parser.add_argument("--no-graphviz", dest="graphviz", action="store_false",
                        help="draw the PNG with matplotlib even when Graphviz's dot is installed")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    config = cfgmod.load(args.config, overrides_from(args))
    process = Process(config, open_source=False)
    g = process.graph
    print(f"process {config.name}: {len(g.order)} modules")
    for n, label in enumerate(g.order, 1):
        module = process.prototypes[label]
        after = ", ".join(g.upstream(label)) or "source"
        print(f"{n:3d}. {label:<20} {type(module).__name__:<24} after: {after}")
    if g.pruned:
        print(f"pruned (nothing needs them): {', '.join(g.pruned)}")
    print(f"source keys read: {', '.join(sorted(g.source_keys)) or 'none'}")
    stem = Path(config.name)
    dot_path = Path(args.dot or f"{stem}.dot")
    png_path = Path(args.png or f"{stem}.png")
    reserved = [(config.file, "the configuration file")] if config.file else []
    # both checked before either is written; each written under a temporary name, renamed when whole
    dot = PendingText(str(dot_path), "--dot", reserved)
    try:
        png = PendingText(str(png_path), "--png", [*reserved, (dot.path, "the DOT file")])
    except BaseException:
        dot.abort()
        raise
    try:
        dot.write(drawing.to_dot(g, process.prototypes))
        with open(png.tmp_path, "wb") as stream:  # a file object: the temporary's suffix is not a format
            drawn_by = drawing.draw_png(g, process.prototypes, stream, graphviz=None if args.graphviz else False)
        png.mark_written()
        dot.commit()
        png.commit()
    except BaseException:
        dot.abort()
        png.abort()
        raise
    hint = "" if drawn_by == "Graphviz" or not args.graphviz else "; install Graphviz (dot) for a laid-out picture"
    print(f"wrote {dot_path} and {png_path} (drawn by {drawn_by}{hint})")
    return 0
