"""``sonic compare A B``: are two outputs the same (e.g. a direct and a SONIC run)? Exit 0 if equal within tolerance."""

from __future__ import annotations

import argparse

from ..compare import compare_files


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("compare", help="compare two ROOT outputs branch by branch", description=__doc__)
    parser.add_argument("a", help="first ROOT file")
    parser.add_argument("b", help="second ROOT file")
    parser.add_argument("--tree", default="Events", help="tree to compare")
    parser.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance")
    parser.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance (|a-b| ≤ atol + rtol·|b|)")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    result = compare_files(args.a, args.b, args.tree, atol=args.atol, rtol=args.rtol)
    print(result.summary())
    return 0 if result.equal() else 1
