"""Reading a Triton server's log for people: its end without the noise, and why it did not start.

Triton's log on a CPU-only start is dominated by CUDA/NVML/DCGM complaints that mean nothing there, and a
model that failed to load is reported as a long escaped line; what a user needs is each model's first
error line and Triton's last word.
"""

from __future__ import annotations

import re
from pathlib import Path

NOISE = ("CUDA", "NVML", "DCGM")


def log_tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` useful lines of the log (``"(no log)"`` when there is none)."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    useful = [line for line in text if not any(word in line for word in NOISE)]
    return "\n".join(useful[-lines:])


def startup_problems(path: Path) -> str:
    """Why the server did not start: each model's load error (first line) and Triton's last word; the end of
    the log when it says nothing more specific."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    problems = []
    for line in text:
        if line.startswith("E") and "failed to load '" in line:
            message = line.split('] "', 1)[-1].split("\\n", 1)[0].rstrip('"')
            problems.append("  " + message)
        elif line.startswith("error:"):
            problems.append("  " + line)
    return "\n".join(problems) if problems else log_tail(path)


#: Triton's line for a model that did not load: ``E... model_lifecycle.cc:...] "failed to load 'NAME' version N: WHY\n..."``
LOAD_FAILURE = re.compile(r"""\] "failed to load '([^']+)' version \d+: (.*?)(?:\\n|"$)""")


def load_failures(path: Path, start: int = 0) -> dict[str, str]:
    """``{model: Triton's reason}`` for each model whose load failed in the log after byte ``start``."""
    try:
        with open(path, "rb") as stream:
            stream.seek(start)
            lines = stream.read().decode(errors="replace").splitlines()
    except OSError:
        return {}
    failed = {}
    for line in lines:
        found = LOAD_FAILURE.search(line)
        if line.startswith("E") and found:
            failed[found[1]] = found[2].replace('\\"', '"')
    return failed
