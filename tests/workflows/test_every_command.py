"""Every command a user can type answers ``--help`` (the lazily imported benchmarks and generators too), and
``-v`` shows a traceback without changing what the exit status says."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from sonic_hep.workflows import cli
from sonic_hep.workflows.cli import describe


def command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every sub-command path of ``parser``, depth first (``("server", "start")`` ...)."""
    paths = []
    for action in parser._actions:  # noqa: SLF001 - argparse offers no public walk over sub-parsers
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for name, child in action.choices.items():
                paths.append((*prefix, name))
                paths.extend(command_paths(child, (*prefix, name)))
    return paths


PATHS = command_paths(cli.build_parser())


def test_the_walk_finds_the_lazy_commands():
    assert ("bench", "native-gpu") in PATHS and ("data", "generate", "protodune") in PATHS
    assert ("server", "checksum") in PATHS and len(PATHS) > 30


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_help(path):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as done:
        cli.main([*path, "--help"])
    assert done.value.code == 0, err.getvalue()
    assert out.getvalue().startswith("usage: sonic " + " ".join(path)), out.getvalue()[:200]


def test_verbose_keeps_the_exit_status_of_a_bug(monkeypatch, capsys):
    def broken(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(describe, "main", broken)
    assert cli.main(["describe", "NullProducer"]) == 70
    assert "internal error" in capsys.readouterr().err
    assert cli.main(["describe", "NullProducer", "-v"]) == 70
    assert "Traceback" in capsys.readouterr().err
