"""Every example of the documentation (``docs/*.md``), ``README.md`` and ``CONTRIBUTING.md`` runs, or at
least parses, so no example can rot silently.

A page's fenced blocks are taken in order, in one fresh empty folder per page (the reader's "empty folder"):

* ```` ```python ```` runs; a page's blocks share one namespace (later blocks use what earlier ones
  defined), with the page's folder as the working directory and on ``sys.path``, as for a reader who
  pastes them into ``python`` started there. A block whose first line is ``# shipped: <path>`` shows a
  shipped file and must be that file's code, word for word.
* ```` ```python title="NAME" ```` (or any language with a ``title``) is a file the reader saves: it is
  written to the folder as NAME, for the blocks after it.
* ```` ```yaml ```` is a configuration, or a fragment of one (some sections; or module entries, indented
  as under ``modules:``): it is checked by the project's own loader and module declarations, as
  ``sonic run`` checks it before reading any event.
* ```` ```bash ```` (or a fence without a language): every ``sonic`` line must parse with the command
  line's own parsers. A block right after ``<!-- test: run -->`` runs for real, as a bash script in the
  page's folder; such examples are written at small sizes. Examples that need what the tests lack (a GPU,
  an HTCondor pool, a cluster's shared filesystem) say so in their text and are only parsed.
* ``<!-- test: before: COMMAND -->`` runs COMMAND before the next block: what the page assumes the reader
  has done by other means (``make demo`` installs, then runs ``sonic demo``).
* ``<!-- test: finally: COMMAND -->`` runs COMMAND when the page is done, whether it passed or not: the
  clean-up a reader would do by hand if an example failed half-way (a fleet's servers stopped).

A command run in a still empty folder (the demo) is run once per session and its files copied to every
page that runs it, to keep the suite short.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.conftest import PROJECT

PAGES = [*sorted((PROJECT / "docs").rglob("*.md")), PROJECT / "README.md", PROJECT / "CONTRIBUTING.md"]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
MARK = re.compile(r"<!-- test: (.+?) -->")
TITLE = re.compile(r'title="([^"]+)"')
SHIPPED = re.compile(r"# shipped: (\S+)\n")
SHELLS = {"", "bash", "sh", "console", "shell"}


@dataclass
class Block:
    """One fenced block of a page: its language, the file name it is shown as, its text, the test marks
    right before it, and its line in the page (for messages)."""

    language: str
    title: str | None
    text: str
    line: int
    marks: list[str] = field(default_factory=list)

    def where(self, page: Path) -> str:
        return f"{page.name}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks in order, each with the ``<!-- test: ... -->`` marks between it and the
    previous block."""
    text = page.read_text()
    found, previous_end = [], 0
    for match in FENCE.finditer(text):
        info = match.group(1).strip()
        title = TITLE.search(info)
        found.append(Block(language=info.split(" ", 1)[0] if info else "", title=title.group(1) if title else None,
                           text=match.group(2), line=text.count("\n", 0, match.start()) + 1,
                           marks=MARK.findall(text[previous_end:match.start()])))
        previous_end = match.end()
    return found


def test_there_are_pages_with_examples():
    languages = {block.language for page in PAGES for block in blocks(page)}
    assert {"python", "yaml", "bash"} <= languages
    assert any("run" in block.marks for page in PAGES for block in blocks(page))


# -- commands --------------------------------------------------------------------------------------------
def sonic_commands(text: str) -> list[str]:
    """The ``sonic ...`` command lines of a block (continuations joined, comments dropped; a
    ``farm-bench ... --`` line gives the command it times)."""
    lines = []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        line = line.split(" -- ", 1)[1].strip() if line.startswith("farm-bench") and " -- " in line else line
        if line.startswith("sonic "):
            lines.append(line)
    return lines


@functools.cache
def sonic_parser():
    """The command line's parser, built once (parsing does not change it)."""
    from sonic_hep.workflows.cli import build_parser

    return build_parser()


def parse_sonic(argv: list[str]) -> None:
    """Parses a command line as ``sonic`` does, the options of a lazily imported command (a benchmark, a
    generator) included, without running it."""
    parser = sonic_parser()
    args, extra = parser.parse_known_args(argv)
    lazy = parser
    for word in argv:  # the parser of the lazily imported command, if this line names one
        children = [a for a in lazy._actions if a.__class__.__name__ == "_SubParsersAction"]  # noqa: SLF001
        if not children or word not in children[0].choices:
            continue
        lazy = children[0].choices[word]
    if hasattr(lazy, "full_parser"):
        lazy.full_parser().parse_args(extra + list(args.arguments))
    elif extra:
        raise SystemExit(f"unrecognized arguments: {extra}")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_commands_shown_are_ones_sonic_accepts(page):
    """Every ``sonic`` command a page shows parses with the command line's own parser (most take minutes or
    a cluster, so only some run: see :func:`test_page_runs`)."""
    for block in blocks(page):
        if block.language not in SHELLS:
            continue
        for line in sonic_commands(block.text):
            try:
                parse_sonic(shlex.split(line, comments=True)[1:])
            except SystemExit as exit_:
                pytest.fail(f"{block.where(page)}: {line!r} is refused by sonic ({exit_})")


def test_a_wrong_option_is_caught():
    with pytest.raises(SystemExit):
        parse_sonic(["bench", "miniaod", "--no-such-option"])
    with pytest.raises(SystemExit):
        parse_sonic(["data", "generate", "miniaod", "-n", "5", "-o", "x.root", "--no-such-option"])
    parse_sonic(["data", "generate", "miniaod", "-n", "5", "-o", "x.root"])


# -- configurations --------------------------------------------------------------------------------------
def check_config(text: str, folder: Path, title: str | None) -> None:
    """Checks a configuration (or a fragment) as ``sonic run`` does before reading events: sections and
    keys, module types and parameters, the graph, the services' settings."""
    from sonic_hep.framework import Process
    from sonic_hep.framework import config as cfgmod

    if title:
        config = cfgmod.load(folder / title)
    else:
        fragment = textwrap.dedent(text)
        data = yaml.safe_load(fragment)
        if text[:1].isspace():  # module entries, as they stand under ``modules:``
            data = {"modules": data}
        data.setdefault("modules", {"docs_placeholder": {"type": "NullProducer"}})
        config = cfgmod.parse(data, file=str(folder / "fragment.yaml"))
    Process(config, open_source=False)


def test_a_wrong_configuration_is_caught(tmp_path):
    from sonic_hep.framework import ConfigError

    with pytest.raises(ConfigError):
        check_config("modules:\n  two: {type: MinCountFilter, min_cout: 2}\n", tmp_path, None)
    with pytest.raises(ConfigError):
        check_config("services:\n  inference: {mode: sonci}\n", tmp_path, None)


# -- running a page --------------------------------------------------------------------------------------
#: commands run in an empty folder, by their text: the folder they left (see the module docstring)
_MADE_IN_EMPTY_FOLDER: dict[str, Path] = {}


def reader_env() -> dict[str, str]:
    """The environment of a reader who activated this project's environment: its ``sonic`` and ``python``
    first on PATH."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def shell(script: str, folder: Path, where: str, tmp_root: Path) -> None:
    """Runs ``script`` with bash in ``folder``, as a reader would (:func:`reader_env`)."""
    key = " ".join(line.split("#", 1)[0].strip() for line in script.splitlines() if line.split("#", 1)[0].strip())
    if not any(folder.iterdir()) and key in _MADE_IN_EMPTY_FOLDER:
        shutil.copytree(_MADE_IN_EMPTY_FOLDER[key], folder, dirs_exist_ok=True, symlinks=True)
        return
    cached = not any(folder.iterdir())
    result = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=folder, env=reader_env(), text=True,
                            capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        pytest.fail(f"{where}: the example failed (exit {result.returncode}):\n{script}\n--- stdout\n"
                    f"{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}")
    if cached:
        keep = tmp_root / f"made-{len(_MADE_IN_EMPTY_FOLDER)}"
        shutil.copytree(folder, keep, symlinks=True)
        _MADE_IN_EMPTY_FOLDER[key] = keep


@pytest.mark.integration
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_runs(page, tmp_path_factory, monkeypatch):
    """The page's examples in order, in one empty folder: files written, configurations checked, Python
    run, the commands marked ``run`` run."""
    folder = tmp_path_factory.mktemp(page.stem.lower())
    tmp_root = tmp_path_factory.getbasetemp()
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    namespace: dict = {"__name__": f"docs.{page.stem}"}  # a fixed module name: modules are registered by it
    cleanups: list[str] = []
    try:
        for number, block in enumerate(blocks(page)):
            for mark in block.marks:
                if mark.startswith("before: "):
                    shell(mark.removeprefix("before: "), folder, block.where(page), tmp_root)
                elif mark.startswith("finally: "):
                    cleanups.append(mark.removeprefix("finally: "))
            if block.title:
                (folder / block.title).write_text(block.text)
            shipped = SHIPPED.match(block.text) if block.language == "python" else None
            if shipped:
                source = (PROJECT / shipped.group(1)).read_text()
                shown = block.text[shipped.end():].strip()
                assert shown in source, f"{block.where(page)} shows code that is not in {shipped.group(1)}"
            elif block.language == "python" and not block.title:
                exec(compile(block.text, f"{block.where(page)} (python block {number + 1})", "exec"),  # noqa: S102
                     namespace)
            elif block.language == "yaml":
                try:
                    check_config(block.text, folder, block.title)
                except Exception as err:  # noqa: BLE001 - the message names the block
                    pytest.fail(f"{block.where(page)}: the configuration is refused: {err}")
            elif block.language in SHELLS and "run" in block.marks:
                shell(block.text, folder, block.where(page), tmp_root)
    finally:
        for command in cleanups:
            subprocess.run(["bash", "-c", command], cwd=folder, env=reader_env(), capture_output=True, timeout=300,
                           stdin=subprocess.DEVNULL)
        # a reader's own files (my_analysis.py) of one page must not shadow another page's of the same name
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(str(folder)):
                del sys.modules[name]
