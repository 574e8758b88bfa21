"""Sub-commands whose implementation is imported only when they run.

``sonic bench NAME`` and ``sonic data generate NAME`` have one module per NAME (benchmarks, event
generators) that import heavy packages (pythia, ACTS, scipy, matplotlib). Building the parser must not
import them all, or every ``sonic`` command pays seconds of start-up. Here each NAME gets a stub parser
whose help line is read from the module's docstring with ``ast`` (no import); the module is imported,
and its own arguments parsed, only when that NAME is run.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import logging
import pkgutil
from collections.abc import Iterator
from pathlib import Path


def discover(package: str, suffix: str = "") -> Iterator[tuple[str, str]]:
    """(name, module path) for each ``<package>.<name><suffix>`` that exists, without importing it."""
    root = importlib.import_module(package)
    for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        if suffix and not info.ispkg:
            continue
        module = f"{package}.{info.name}{suffix}"
        if importlib.util.find_spec(module) is not None:
            yield info.name, module


def docstring(module: str) -> str:
    """The module's docstring, read from its source without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return ""
    return ast.get_docstring(ast.parse(Path(spec.origin).read_text())) or ""


def add_lazy(subparsers: argparse._SubParsersAction, name: str, module: str, prog: str, entry: str,
             out_option: bool = False) -> None:
    """Adds ``name`` whose arguments are parsed by ``module.add_arguments`` and which runs ``module.<entry>``."""
    doc = docstring(module)
    stub = subparsers.add_parser(name, help=doc.splitlines()[0] if doc else "", add_help=False)
    stub.add_argument("arguments", nargs=argparse.REMAINDER)

    def full_parser() -> argparse.ArgumentParser:
        """The command's real parser (imports its module): what runs it, and what the CLI reference shows."""
        from . import Parser  # the package imports this module while it builds its parser

        impl = importlib.import_module(module)
        # the same Parser as every other sub-command: an argument error is one line, exit 2
        parser = Parser(prog=prog, description=impl.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        if out_option:
            # build/ is git-ignored wherever it lies: results run from a checkout never land in the package
            parser.add_argument("--out", default=f"build/bench-{name}", metavar="DIR",
                                help="directory for the tables (Markdown, JSON) and plots (PNG) "
                                     "(default: build/bench-NAME)")
        impl.add_arguments(parser)
        if not any("-v" in action.option_strings for action in parser._actions):  # noqa: SLF001
            parser.add_argument("-v", "--verbose", action="store_true", help="debug logging and full tracebacks")
        return parser

    stub.full_parser = full_parser  # type: ignore[attr-defined]

    def run(args: argparse.Namespace) -> int:
        impl = importlib.import_module(module)
        inner = full_parser().parse_args(args.arguments)
        if getattr(inner, "verbose", False) and not args.verbose:  # -v after NAME: as if given after sonic
            args.verbose = True  # the caller's namespace: tracebacks are shown on failure
            logging.getLogger().setLevel(logging.DEBUG)
        inner.verbose = args.verbose
        return getattr(impl, entry)(inner)

    stub.set_defaults(func=run)
