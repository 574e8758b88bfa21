"""``sonic describe [TYPE]``: a module type's parameters, inputs and products (or the list of types)."""

from __future__ import annotations

import argparse

from ...framework.errors import ConfigError
from ...framework.registry import all_types, lookup
from . import plain


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("describe", help="show a module type's parameters and products", description=__doc__)
    parser.add_argument("type", nargs="?", help="module type name; omit to list all types")
    parser.set_defaults(func=main)


def summary(doc: str | None) -> str:
    """The first sentence of a docstring's first paragraph, in plain words, for the one-line listing.

    The paragraph is joined first (a sentence may wrap in the source, and its first line alone would end
    mid-phrase); it is cut at the first full stop outside parentheses, so "(e.g. HT)" does not end it."""
    paragraph = " ".join(plain((doc or "").strip().split("\n\n")[0]).split())
    depth = 0
    for i, char in enumerate(paragraph):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "." and depth == 0 and paragraph[i + 1:i + 2] in ("", " "):
            return paragraph[:i + 1]
    return paragraph


def main(args: argparse.Namespace) -> int:
    if not args.type:
        for name, cls in sorted(all_types().items()):
            print(f"{name:<28} {cls.kind:<9} {summary(cls.__doc__)}")
        return 0
    try:
        cls = lookup(args.type)
    except KeyError as err:
        raise ConfigError(err.args[0]) from None
    print(plain(cls.describe()))
    return 0
