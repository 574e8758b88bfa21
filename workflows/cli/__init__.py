"""The ``sonic`` command line: one sub-module per sub-command, discovered at start-up.

Each module in this package defines ``register(subparsers)``, which adds its sub-command and sets
``func`` (called with the parsed arguments, returning an exit code). Errors a user can cause
(:class:`~sonic_hep.framework.errors.SonicError`) are printed as one message, without a traceback;
``-v`` shows debug logging and tracebacks.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

from ...framework.errors import SonicError
from ...framework.process import Interrupted


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sonic", description="HEP event processing with coprocessors as a service")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging and full tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # options of lazily imported sub-commands (``sonic bench NAME ...``) are parsed by their module
        if not hasattr(args, "arguments"):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.arguments = extra + list(args.arguments)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("urllib3", "matplotlib", "asyncio", "fsspec", "distributed", "tornado", "bokeh"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return int(args.func(args) or 0)
    except Interrupted as err:
        print(f"sonic: {err}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("sonic: interrupted", file=sys.stderr)
        return 130
    except SonicError as err:
        if args.verbose:
            raise
        print(f"sonic: error: {err}", file=sys.stderr)
        for note in getattr(err, "__notes__", []):
            print(f"  {note}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
