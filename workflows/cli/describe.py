"""``sonic describe [TYPE] [--config CONFIG] [--import MODULE]``: a module type's parameters, inputs and products
(or the list of types, the user's own ones included: those a configuration's ``imports`` names, or ``--import``)."""

from __future__ import annotations

import argparse
import os
import sys

from ...framework import config as cfgmod
from ...framework.errors import ConfigError
from ...framework.registry import UserModuleError, all_types, import_user_modules, lookup
from . import plain


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("describe", help="show a module type's parameters and products", description=__doc__)
    parser.add_argument("type", nargs="?", help="module type name (or my_analysis.Class); omit to list all types")
    parser.add_argument("--config", "-c", metavar="CONFIG",
                        help="also the module types of this configuration's imports (its own module files)")
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="also the module types of a file of yours (my_analysis or path/to/file.py; repeatable)")
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


def _origin(cls: type) -> str:
    """Where a user's class comes from (`` [my_analysis.py]``); nothing for the project's and plug-ins' own."""
    module = cls.__module__
    if module.startswith("sonic_hep.") or module == "sonic_hep":
        return ""

    where = getattr(sys.modules.get(module), "__file__", None)
    if where and not os.path.relpath(where).startswith(".."):
        where = os.path.relpath(where)
    return f"  [{where or module}]"


def main(args: argparse.Namespace) -> int:
    folder = os.getcwd()
    if args.config:
        config = cfgmod.load(args.config)  # imports the configuration's own module files
        folder = config.folder
    try:
        import_user_modules(args.imports, os.getcwd())
    except UserModuleError as err:
        raise ConfigError(str(err), file="<command line>", key="--import") from None
    if not args.type:
        for name, cls in sorted(all_types().items()):
            print(f"{name:<28} {cls.kind:<9} {summary(cls.__doc__)}{_origin(cls)}")
        return 0
    try:
        cls = lookup(args.type, folder)
    except KeyError as err:
        raise ConfigError(str(err.args[0])) from None
    print(plain(cls.describe()))
    return 0
