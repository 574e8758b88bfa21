"""One report for every benchmark: where it ran, how it was started, when, and its files.

Each ``sonic bench NAME`` measures something and formats its own tables; everything else a reader of a
result needs is the same for all of them and lives here, so every page opens with the same three lines
(command, machine, date) and every file appears complete or not at all (:mod:`framework.atomic`):

    report = BenchReport.start("framework", args.out)   # before any CPU pinning narrows the machine seen
    data = {**report.fields(), "rows": rows}
    report.write(markdown(data), data, {"framework.png": lambda path: plot(rows, path)})

writes ``OUT/framework.md``, ``OUT/framework.json`` and ``OUT/framework.png``, prints the page and where
the files went.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ...framework.atomic import write_text, write_with
from ._machine import bench_command, machine_description


def header(title: str, report: Mapping[str, Any], *lines: str) -> list[str]:
    """The opening lines of a benchmark's page: its title, then ``Command``, ``Machine`` and ``Date`` from
    ``report`` (a field it lacks is left out: a page built from a partial report still reads), then ``lines``
    (the bench's own settings), each a Markdown line of its own.

    Args:
        title (str): the page's heading, without ``#``.
        report (mapping): the bench's data, holding :meth:`BenchReport.fields`.
        lines (str): further lines of the header (input, pinning, load).
    """
    date = ", ".join(str(part) for part in (report.get("date"), report.get("load")) if part)
    fields = [("Command", f"`{report['command']}`" if report.get("command") else ""),
              ("Machine", report.get("machine", "")), ("Date", date)]
    body = [f"{name}: {value}" for name, value in fields if value] + list(lines)
    return [f"# {title}", "", *(f"{line}  " for line in body[:-1]), *body[-1:], ""]


@dataclass(frozen=True)
class BenchReport:
    """Where a benchmark's results go and what every one of them records.

    Args:
        name (str): the bench's command name (``sonic bench NAME``), e.g. ``gpu-models``.
        out (Path): the output folder (created by :meth:`start`).
        machine (str): :func:`machine_description`, taken when the bench started.
        command (str): :func:`bench_command`, the command line that ran it.
        date (str): when it started, ISO 8601 with the local offset.
        stem (str): the files' name before ``.md`` and ``.json`` (the name with ``_`` for ``-`` unless given).
    """

    name: str
    out: Path
    machine: str
    command: str
    date: str
    stem: str

    @classmethod
    def start(cls, name: str, out: str | Path, stem: str | None = None) -> BenchReport:
        """Creates the output folder and records machine, command and date. Call it before pinning this
        process to some cores: the machine is described as this process sees it."""
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        return cls(name, folder, machine_description(), bench_command(name),
                   datetime.now().astimezone().isoformat(timespec="seconds"), stem or name.replace("-", "_"))

    def fields(self) -> dict[str, str]:
        """``machine``, ``command`` and ``date``: the keys every bench's JSON starts with."""
        return {"machine": self.machine, "command": self.command, "date": self.date}

    def write(self, markdown: str | None, data: Mapping[str, Any],
              figures: Mapping[str, Callable[[Path], object]] | None = None, indent: int = 2) -> list[Path]:
        """Writes ``<stem>.md`` (unless ``markdown`` is None), ``<stem>.json`` and each figure, every file
        atomically; prints the page and the paths; returns the paths.

        Args:
            markdown (str | None): the page.
            data (mapping): the results, written as JSON (values JSON cannot hold are written as text).
            figures (mapping): file name → a function drawing the figure into the path it is given (a
                temporary, renamed into place once drawn: its name does not end in ``.png``, so a plotting
                library must be told the format).
            indent (int): the JSON's indentation.
        """
        paths = [self.out / f"{self.stem}.json"]
        write_text(str(paths[0]), paths[0].name, json.dumps(data, indent=indent, default=str))
        if markdown is not None:
            paths.insert(0, self.out / f"{self.stem}.md")
            write_text(str(paths[0]), paths[0].name, markdown)
        for name, draw in (figures or {}).items():
            paths.append(self.out / name)
            write_with(str(paths[-1]), name, lambda tmp, draw=draw: draw(Path(tmp)))
        if markdown is not None:
            print(markdown)
        print(f"results in {where(os.path.abspath(self.out), self.stem, [p.name for p in paths])}")
        return paths


def where(folder: str, stem: str, names: list[str]) -> str:
    """``/out/gpu.{md,json,png} and /out/gpu_timeline.png``: the files written, the stem's together."""
    suffixes = [name[len(stem) + 1:] for name in names if name.startswith(stem + ".")]
    others = [f"{folder}/{name}" for name in names if not name.startswith(stem + ".")]
    grouped = [f"{folder}/{stem}.{{{','.join(suffixes)}}}" if len(suffixes) > 1 else f"{folder}/{stem}.{suffixes[0]}"]
    return " and ".join([", ".join(grouped + others[:-1]), *others[-1:]]) if others else grouped[0]
