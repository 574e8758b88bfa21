"""MkDocs hooks: pages built from the code, so they cannot drift from it.

* ``reference/cli.md``: the marker ``<!-- sonic-cli-reference -->`` becomes every command's ``--help``,
  generated from the parsers (:mod:`sonic_hep.workflows.cli._reference`); ``<!-- sonic-server-options -->``
  the table of a server's options, from their one type (``server_flags.options_table``).
* The API reference: mkdocstrings reads the docstrings statically (griffe), and needs a package folder named
  ``sonic_hep``. The checkout keeps its rooms at the top level (``framework/`` is installed as
  ``sonic_hep.framework``), so a folder of links, ``build/api-src/sonic_hep/<room>``, gives it that shape.
* :class:`RestToMarkdown`, a griffe extension: the docstrings are written for the terminal and for Python's
  ``help()``, in reST's inline markup; the site is Markdown.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("framework", "modules", "workflows", "data", "configs")
CLI_MARKER = "<!-- sonic-cli-reference -->"
#: replaced by the table of the server options (``ServerOptions``: fallback_server keys and their flags)
SERVER_OPTIONS_MARKER = "<!-- sonic-server-options -->"


def on_startup(command: str, dirty: bool) -> None:
    """Lays out ``build/api-src/sonic_hep`` before mkdocstrings looks for the package."""
    package = ROOT / "build" / "api-src" / "sonic_hep"
    package.mkdir(parents=True, exist_ok=True)
    for room in ROOMS:
        link = package / room
        target = os.path.relpath(ROOT / room, package)
        if link.is_symlink() and os.readlink(link) == target:
            continue
        if link.is_symlink():
            link.unlink()
        link.symlink_to(target, target_is_directory=True)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if CLI_MARKER in markdown:
        from sonic_hep.workflows.cli._reference import markdown as cli_markdown

        markdown = markdown.replace(CLI_MARKER, cli_markdown())
    if SERVER_OPTIONS_MARKER in markdown:
        from sonic_hep.workflows.cli.server_flags import options_table

        markdown = markdown.replace(SERVER_OPTIONS_MARKER, options_table())
    return markdown


_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`(~?)([^`<]*?)\s*(?:<[^`>]*>)?`")  # :class:`~a.B`, :mod:`text <target>`
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
_LITERAL_BLOCK = re.compile(r"(\S)?\s*::$", re.MULTILINE)  # "Example::" opens an indented literal block


def rest_to_markdown(text: str) -> str:
    """reST inline markup as Markdown: roles and double-backquoted literals become code, ``::`` a colon."""
    def role(match: re.Match[str]) -> str:
        short, title = match.group(1), match.group(2).lstrip(".")
        return f"`{title.rsplit('.', 1)[-1] if short else title}`"

    text = _ROLE.sub(role, text)
    text = _LITERAL.sub(lambda m: f"`{m.group(1)}`", text)
    return _LITERAL_BLOCK.sub(lambda m: f"{m.group(1)}:" if m.group(1) else "", text)


class RestToMarkdown(griffe.Extension):
    """Rewrites every docstring's inline reST as Markdown before mkdocstrings renders it."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rest_to_markdown(obj.docstring.value)
