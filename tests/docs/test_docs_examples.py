"""Every Python example of ``docs/*.md`` runs: a page's blocks run in order in one namespace (later blocks use
what earlier ones defined), and a block that shows a shipped module (first line ``# shipped: <path>``) is
checked to be that file's code, word for word, so the page cannot drift from what users import."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import PROJECT

DOCS = sorted((PROJECT / "docs").glob("*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
SHIPPED = re.compile(r"# shipped: (\S+)\n")


def python_blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


def test_there_are_pages_with_examples():
    assert DOCS and all(python_blocks(page) for page in DOCS)


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
