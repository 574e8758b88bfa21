"""The layering of the rooms, read from the source (every import, also those inside functions):

* the framework core (``framework/`` outside ``framework/inference/``) never imports inference, workflows,
  modules or data: a job without models, or a new inference back end, must not drag the other along;
* modules import the framework only through its public APIs, ``sonic_hep.framework`` and
  ``sonic_hep.framework.inference`` (what their ``__init__`` exports), so the framework's insides can move;
* workflows and data reach inference only through the public APIs of its packages (``framework.inference``,
  ``.sonic``, ``.serving``) or the code that runs inside servers (``framework.inference.backends``, whose
  import path model repositories name), so inference can be rearranged without touching the command line;
* running a server never depends on the SONIC client (``serving`` imports nothing from ``sonic``): a site
  that only serves models must not need the client's insides, and the two cannot form a cycle;
* nothing imports ``workflows`` except ``workflows`` itself: it is the top (the command line, the grid);
* nothing takes a private name (``_x``) from another module.

A failure names the importing file, line and what it imported.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from sonic_hep import framework
from sonic_hep.framework import inference
from sonic_hep.framework.inference import serving, sonic
from tests.conftest import PROJECT

ROOMS = ("framework", "modules", "workflows", "data", "configs")
PUBLIC = {"framework": set(framework.__all__), "framework.inference": set(inference.__all__),
          "framework.inference.sonic": set(sonic.__all__), "framework.inference.serving": set(serving.__all__)}


@dataclass(frozen=True)
class Import:
    file: str
    line: int
    importer: str  # dotted module, without the package prefix
    target: str  # dotted module imported (from-imports: the module named after ``from``)
    names: tuple[str, ...]

    def __str__(self) -> str:
        names = f" ({', '.join(self.names)})" if self.names else ""
        return f"{self.file}:{self.line} imports {self.target}{names}"


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(PROJECT).with_suffix("").parts)
    package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if package else parts), package


def project_imports() -> list[Import]:
    found = []
    for room in ROOMS:
        for path in sorted((PROJECT / room).rglob("*.py")):
            importer, package = _module_name(path)
            here = importer.split(".") if package else importer.split(".")[:-1]
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = here[: len(here) - node.level + 1]
                        target = ".".join(base + ([node.module] if node.module else []))
                    elif (node.module or "").startswith("sonic_hep."):
                        target = node.module.removeprefix("sonic_hep.")
                    else:
                        continue
                    names = tuple(a.name for a in node.names)
                elif isinstance(node, ast.Import):
                    targets = [a.name.removeprefix("sonic_hep.") for a in node.names if a.name.startswith("sonic_hep.")]
                    if not targets:
                        continue
                    target, names = targets[0], ()
                else:
                    continue
                found.append(Import(str(path.relative_to(PROJECT)), node.lineno, importer, target, names))
    return found


IMPORTS = project_imports()


def _room(module: str) -> str:
    return module.split(".")[0]


def _is_core(module: str) -> bool:
    return module.startswith("framework") and not module.startswith("framework.inference")


def test_the_scan_sees_the_imports():
    assert any(i.importer == "framework.process" and i.target == "framework.scheduler" for i in IMPORTS)
    assert any(i.importer.startswith("modules.miniaod") and i.target == "framework.inference" for i in IMPORTS)


def test_the_framework_core_imports_no_inference_workflows_modules_or_data():
    bad = [i for i in IMPORTS if _is_core(i.importer)
           and (i.target.startswith("framework.inference") or _room(i.target) in ("workflows", "modules", "data"))]
    assert not bad, "\n".join(map(str, bad))


def test_modules_use_the_public_framework_api_only():
    bad = []
    for i in IMPORTS:
        if _room(i.importer) != "modules" or _room(i.target) != "framework":
            continue
        public = PUBLIC.get(i.target)
        if public is None or not set(i.names) <= public:
            bad.append(i)
    assert not bad, "\n".join(map(str, bad))


def test_workflows_and_data_use_the_public_inference_apis_only():
    bad = []
    for i in IMPORTS:
        if _room(i.importer) not in ("workflows", "data", "configs") or not i.target.startswith("framework.inference"):
            continue
        if i.target.startswith("framework.inference.backends"):
            continue
        public = PUBLIC.get(i.target)
        if public is None or not set(i.names) <= public:
            bad.append(i)
    assert not bad, "\n".join(map(str, bad))


def test_serving_never_imports_the_sonic_client():
    bad = [i for i in IMPORTS if i.importer.startswith("framework.inference.serving")
           and i.target.startswith("framework.inference.sonic")]
    assert not bad, "\n".join(map(str, bad))


def test_only_workflows_import_workflows():
    bad = [i for i in IMPORTS if _room(i.target) == "workflows" and _room(i.importer) != "workflows"]
    assert not bad, "\n".join(map(str, bad))


@pytest.mark.parametrize("room", ROOMS)
def test_no_private_name_crosses_modules(room):
    bad = [i for i in IMPORTS if _room(i.importer) == room and i.target != i.importer
           and any(n.startswith("_") and not n.startswith("__") for n in i.names)]
    assert not bad, "\n".join(map(str, bad))
