"""``sonic describe [TYPE]``: a module type's parameters, inputs and products (or the list of types)."""

from __future__ import annotations

import argparse

from ...framework.errors import ConfigError
from ...framework.registry import all_types, lookup


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("describe", help="show a module type's parameters and products", description=__doc__)
    parser.add_argument("type", nargs="?", help="module type name; omit to list all types")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if not args.type:
        for name, cls in sorted(all_types().items()):
            doc = (cls.__doc__ or "").strip().splitlines()
            print(f"{name:<28} {cls.kind:<9} {doc[0] if doc else ''}")
        return 0
    try:
        cls = lookup(args.type)
    except KeyError as err:
        raise ConfigError(err.args[0]) from None
    print(cls.describe())
    return 0
