"""Every Python example of ``docs/*.md`` runs: a page's blocks run in order in one namespace (later blocks use
what earlier ones defined), and a block that shows a shipped module (first line ``# shipped: <path>``) is
checked to be that file's code, word for word, so the page cannot drift from what users import."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import PROJECT

DOCS = sorted((PROJECT / "docs").glob("*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
SHIPPED = re.compile(r"# shipped: (\S+)\n")


def python_blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


def test_there_are_pages_with_examples():
    assert DOCS and any(python_blocks(page) for page in DOCS)


#: a fenced block of commands (no language, or a shell's)
COMMANDS = re.compile(r"^```(?:bash|sh|console)?\n(.*?)^```", re.MULTILINE | re.DOTALL)


def sonic_commands(page: Path) -> list[str]:
    """The ``sonic ...`` command lines a page shows (continuations joined; a ``farm-bench ... --`` line
    gives the command it times)."""
    lines = []
    for block in COMMANDS.findall(page.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" -- ", 1)[1].strip() if line.startswith("farm-bench") and " -- " in line else line
            if line.startswith("sonic "):
                lines.append(line.split("#", 1)[0].strip())
    return lines


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_commands_shown_are_ones_sonic_accepts(page):
    """Every ``sonic`` command a page shows parses with the command line's own parser (the benchmarks take
    minutes, so they are not run here; their options must exist)."""
    for line in sonic_commands(page):
        try:
            parse_sonic(shlex.split(line)[1:])
        except SystemExit as exit_:
            pytest.fail(f"{page.name}: {line!r} is refused by sonic ({exit_})")


def parse_sonic(argv: list[str]) -> None:
    """Parses a command line as ``sonic`` does, a benchmark's own options included, without running it."""
    import argparse
    import importlib

    from sonic_hep.workflows.cli import build_parser

    args, extra = build_parser().parse_known_args(argv)
    if getattr(args, "command", None) == "bench":  # a benchmark's options belong to its own module
        module = importlib.import_module(f"sonic_hep.workflows.bench.{args.benchmark.replace('-', '_')}")
        inner = argparse.ArgumentParser(prog=f"sonic bench {args.benchmark}", exit_on_error=False)
        inner.add_argument("--out")
        module.add_arguments(inner)
        inner.parse_args(extra + list(args.arguments))
    elif extra:
        raise SystemExit(f"unrecognized arguments: {extra}")


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_shipped_code_shown_is_the_shipped_code(page):
    for block in python_blocks(page):
        shown = SHIPPED.match(block)
        if shown:
            source = (PROJECT / shown.group(1)).read_text()
            assert block[shown.end():].strip() in source, f"{page.name} shows code that is not in {shown.group(1)}"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_examples_run(page):
    namespace: dict = {"__name__": f"docs.{page.stem}"}  # a fixed module name: modules are registered by it
    for number, block in enumerate(python_blocks(page)):
        if SHIPPED.match(block):
            continue
        code = compile(block, f"{page.name} (python block {number + 1})", "exec")
        exec(code, namespace)  # noqa: S102 - running the documentation's own examples is the point
