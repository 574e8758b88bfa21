"""The command line as Markdown, generated from its own parsers: the documentation's CLI reference.

Written by hand, a reference drifts from the options the code accepts; generated from the parsers
that :func:`~sonic_hep.workflows.cli.build_parser` builds, it cannot. Every command's ``--help`` text
becomes one section, in the order a user meets them (``sonic``, then each sub-command depth first).
The lazily imported commands (``sonic bench NAME``, ``sonic data generate NAME``) are shown with their
real options, which means importing their modules here.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

#: the width the help text is wrapped at (argparse reads ``COLUMNS``): fixed, so the page does not depend
#: on the terminal that built it
WIDTH = 100


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """``(path, parser)`` for ``parser`` and every sub-command under it, depth first; a lazily imported
    command gives its real parser."""
    full = getattr(parser, "full_parser", None)
    yield path, full() if full else parser
    for action in parser._actions:  # noqa: SLF001 - argparse offers no public walk over sub-parsers
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            seen: set[int] = set()
            for name, child in action.choices.items():
                if id(child) not in seen:  # an alias names the same parser again
                    seen.add(id(child))
                    yield from commands(child, (*path, name))


def markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """One ``##`` section per command: its name, then its ``--help`` text as a code block."""
    from . import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)
    try:
        sections = []
        for path, command in commands(parser or build_parser()):
            title = " ".join(("sonic", *path))
            level = "#" * min(2 + max(len(path) - 1, 0), 4)
            sections.append(f"{level} `{title}`\n\n```text\n{command.format_help().rstrip()}\n```\n")
        return "\n".join(sections)
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
