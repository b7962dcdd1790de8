"""The service's layers import downward only, so that no cycle between use cases and HTTP can come back:

    core <- data <- infra <- services <- schemas <- web | workers <- api | console | cli <- app

A part is a folder directly under service/ (and cli.py); the folders are the layers. A module may import its
own part and any part of a lower layer. Within a layer its parts may import each
other, but for the entry points (api, console, cli), which stand side by side and share only what lies below
them. The core, the data and the use cases import no web or validation framework either: they know nothing
of HTTP.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Lowest first; a part is a folder directly under service/, or cli.py ("app" is service/__init__.py).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),  # the science
    ("data",),  # what is stored, and the built-in data
    ("infra",),  # configuration, the database's engines and sessions, logs, metrics, locks
    ("services",),  # the use cases
    ("schemas",),  # requests and responses: validated, loaded into the use cases' values, described
    ("web", "workers"),  # what the entry points share: HTTP's edges, and the work done in the background
    ("api", "console", "cli"),  # the entry points
    ("app",),  # create_app: wires them together
)
SIDE_BY_SIDE = frozenset({"api", "console", "cli"})
FRAMEWORKS = frozenset({"flask", "flask_smorest", "werkzeug", "marshmallow", "webargs", "apispec"})
FRAMEWORK_FREE = frozenset({"core", "data", "services"})
LAYER_OF = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}


def part_of_file(path: Path, package: Path) -> str:
    relative = path.relative_to(package)
    if relative == Path("__init__.py"):
        return "app"
    return relative.parts[0].removesuffix(".py")


def part_of_module(module: str) -> str | None:
    """The part of the service `module` is in (None: not the service's)."""
    names = module.split(".")
    if names[0] != "service":
        return None
    return names[1] if len(names) > 1 else "app"


def imports(path: Path, package: Path) -> list[tuple[int, str]]:
    """(line, module) of each import in `path`, anywhere in it; `from service import x` as service.x."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module if node.level == 0 else _absolute(path, package, node)
            if module == package.name:  # what it imports are parts of the service, not names of service
                found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, module))
    return found


def _absolute(path: Path, package: Path, node: ast.ImportFrom) -> str:
    """The module a relative import names, seen from `path`."""
    inside = [package.name, *path.relative_to(package).parent.parts]  # the package `path` is in
    anchor = inside[: len(inside) - (node.level - 1)]
    return ".".join([*anchor, node.module] if node.module else anchor)


def violations(package: Path) -> list[str]:
    """Every import in the package at `package` (a directory named service) against the layers."""
    found = []
    for path in sorted(package.rglob("*.py")):
        source = part_of_file(path, package)
        assert source in LAYER_OF, f"{path.relative_to(package.parent)}: a part no layer names: add it"
        for line, module in imports(path, package):
            where = f"{path.relative_to(package.parent)}:{line} imports {module}"
            top = module.split(".")[0]
            if source in FRAMEWORK_FREE and top in FRAMEWORKS:
                found.append(f"{where}: {source} imports no web or validation framework")
            target = part_of_module(module)
            if target is None or target == source:
                continue
            if target not in LAYER_OF:
                found.append(f"{where}: a part no layer names")
            elif LAYER_OF[target] > LAYER_OF[source]:
                found.append(f"{where}: {target} is in a layer above {source}")
            elif LAYER_OF[target] == LAYER_OF[source] and source in SIDE_BY_SIDE:
                found.append(f"{where}: {source} and {target} stand side by side")
    return found


def test_every_import_of_the_service_points_down_its_layers():
    assert violations(ROOT / "service") == []


def test_the_layers_name_every_part_of_the_service():
    parts = {part_of_file(path, ROOT / "service") for path in (ROOT / "service").rglob("*.py")}
    assert parts == set(LAYER_OF)


def write(package: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


@pytest.mark.parametrize(
    ("name", "text", "complaint"),
    [
        (
            "infra/db.py",
            "from service.services.audit import act_as\n",
            "service/infra/db.py:1 imports service.services.audit: services is in a layer above infra",
        ),
        (
            "services/plans.py",
            "import math\n\n\ndef f():\n    from service.schemas.plans import PlanInputsSchema\n",
            "service/services/plans.py:5 imports service.schemas.plans: schemas is in a layer above services",
        ),
        (
            "console/views.py",
            "from service.api.reports import csv_response\n",
            "service/console/views.py:1 imports service.api.reports: console and api stand side by side",
        ),
        (
            "services/keys.py",
            "from service import api\n",
            "service/services/keys.py:1 imports service.api: api is in a layer above services",
        ),
        (
            "services/errors.py",
            "import flask\n",
            "service/services/errors.py:1 imports flask: services imports no web or validation framework",
        ),
        (
            "core/units.py",
            "from service.data.models import Plan\n",
            "service/core/units.py:1 imports service.data.models: data is in a layer above core",
        ),
        (
            "services/plans.py",
            "from ..schemas import plans\n",
            "service/services/plans.py:1 imports service.schemas: schemas is in a layer above services",
        ),
    ],
)
def test_the_check_names_the_file_and_the_import_that_point_up_or_sideways(tmp_path, name, text, complaint):
    package = write(tmp_path / "service", {"__init__.py": "", name: text})
    assert violations(package) == [complaint]


def test_the_check_lets_imports_that_point_down_pass(tmp_path):
    package = write(
        tmp_path / "service",
        {
            "__init__.py": "from service import api, cli, console\n",
            "api/plans.py": "from service.schemas import plans\nimport service.services.plans\n",
            "schemas/plans.py": "from service.services.plans import PlanRequest\nimport marshmallow\n",
            "services/plans.py": "from service.infra import actors\nfrom service.core import engine\n",
            "infra/db.py": "from service.data.models import Plan\nimport flask\n",
        },
    )
    assert violations(package) == []
