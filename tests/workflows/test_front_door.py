"""The front door as a newcomer meets it: what the README, configurations and benchmark texts say, and the
one-line errors of commands that need something a fresh checkout lacks (CMS's models, torch, an offline bundle).

Everything here runs without servers: the texts are read, the entry points run in subprocesses.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.errors import ConfigError
from sonic_hep.framework.inference.service import resolve_repository

PROJECT = Path(__file__).resolve().parents[2]

#: words that belong to the machines this project was developed on, not to a user's checkout
DEVELOPMENT_WORDS = re.compile(r"\.\./shared|\blent\b|lent_node|\bthe seeds\b|\bseeds[:']|`device` tool"
                               r"|\bdevice tool\b|\.whl/|/work/main|\.gl/|/\.device/", re.IGNORECASE)


def front_door_texts() -> list[Path]:
    """The files a user reads: READMEs, the documentation (with the benchmark data beside its figures),
    .gitignore, shipped configurations."""
    return [PROJECT / "README.md", PROJECT / "CONTRIBUTING.md", *sorted((PROJECT / "docs").rglob("*.md")),
            PROJECT / ".gitignore", PROJECT / "workflows/bench/offline_run.sh",
            *sorted((PROJECT / "modules").glob("*/README.md")), *sorted((PROJECT / "configs").glob("*.yaml")),
            *sorted((PROJECT / "docs").rglob("*.json"))]


@pytest.mark.parametrize("path", front_door_texts(), ids=lambda p: str(p.relative_to(PROJECT)))
def test_texts_do_not_speak_of_the_development_environment(path):
    hits = [f"{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
            if DEVELOPMENT_WORDS.search(line)]
    assert not hits, f"{path.relative_to(PROJECT)} names the development environment:\n" + "\n".join(hits)


@pytest.mark.parametrize("bench", ["framework", "inference", "miniaod", "protodune", "exatrkx", "reliability"])
def test_bench_help_does_not_speak_of_the_development_environment(bench):
    result = subprocess.run([sys.executable, "-m", "sonic_hep.workflows.cli", "bench", bench, "--help"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout
    assert not DEVELOPMENT_WORDS.search(result.stdout), result.stdout


def test_the_pattern_catches_what_it_is_for():
    """The word list is tested too, so that a typo in it cannot make the checks above pass vacuously."""
    for text in ("see ../shared/real", "on a lent node", "the seeds' batch sizes", "(seeds: ~600)",
                 "through the `device` tool", "carried in .whl/"):
        assert DEVELOPMENT_WORDS.search(text), text
    for text in ("fixed seeds; no torch", "The tests use other seeds.", "writes silently"):
        assert not DEVELOPMENT_WORDS.search(text), text


# --- CMS's production models are the user's: miniaod_cms names the variable that points at them -----------

def test_miniaod_cms_takes_its_repository_from_the_environment():
    config = cfgmod.load("miniaod_cms")
    repositories = config.services["inference"]["repository"]
    assert repositories[0] == "$SONIC_HEP_CMS_MODELS" and "data/models/miniaod" in repositories


def test_unset_model_variable_is_one_line_naming_the_variable_and_the_override(monkeypatch):
    monkeypatch.delenv("SONIC_HEP_CMS_MODELS", raising=False)
    with pytest.raises(ConfigError) as err:
        resolve_repository("$SONIC_HEP_CMS_MODELS")
    message = str(err.value)
    assert "\n" not in message
    assert "SONIC_HEP_CMS_MODELS" in message and "services.inference.repository" in message
    assert "export SONIC_HEP_CMS_MODELS=DIR" in message and "-p 'services.inference.repository=[" in message


def test_model_variable_is_expanded_when_set(monkeypatch, tmp_path):
    monkeypatch.setenv("SONIC_HEP_CMS_MODELS", str(tmp_path))
    assert resolve_repository("$SONIC_HEP_CMS_MODELS") == str(tmp_path)
    assert resolve_repository("${SONIC_HEP_CMS_MODELS}") == str(tmp_path)


# --- training without torch: one line naming the extra -----------------------------------------------------

HIDE_TORCH = """
import runpy, sys
sys.modules["torch"] = None  # as if torch were not installed: `import torch` raises ImportError
sys.argv = ["train", *sys.argv[1:]]
runpy.run_module(sys.argv.pop(1), run_name="__main__")
"""


@pytest.mark.parametrize("module, args", [
    ("sonic_hep.data.exatrkx.train", ["--train", "t.root", "--validation", "v.root", "--out", "repo"]),
    ("sonic_hep.data.miniaod.train", ["fit"]),
    ("sonic_hep.data.protodune.train", []),
])
def test_training_without_torch_is_one_line_naming_the_train_extra(module, args, tmp_path):
    result = subprocess.run([sys.executable, "-c", HIDE_TORCH, module, *args], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "needs torch" in lines[0] and "pip install 'sonic-hep[train]'" in lines[0]
    assert list(tmp_path.iterdir()) == []  # nothing written before the check


# --- the offline benchmark runner says what it needs ---------------------------------------------------------

def test_offline_run_without_its_bundle_is_one_line(tmp_path):
    result = subprocess.run(["bash", str(PROJECT / "workflows/bench/offline_run.sh"), "protodune", str(tmp_path / "out")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no Triton bundle at offline/tritonserver-py312.tar.xz" in lines[0], result.stderr
    assert not (tmp_path / "out").exists()
