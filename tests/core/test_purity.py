"""service/core is the science: it imports the standard library, numpy/scipy and itself, nothing else."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "service" / "core"
ALLOWED_THIRD_PARTY = {"numpy", "scipy"}


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules.add(node.module)
    return modules


def test_the_core_depends_only_on_the_standard_library_numpy_scipy_and_itself():
    files = sorted(CORE.rglob("*.py"))
    assert len(files) >= 8, files  # the scan must see the core, or it proves nothing
    for path in files:
        for module in imported_modules(path):
            top = module.split(".")[0]
            allowed = (
                module.startswith("service.core")
                or top in sys.stdlib_module_names
                or top in ALLOWED_THIRD_PARTY
            )
            assert allowed, f"{path.name} imports {module}"


def test_the_scan_would_notice_a_forbidden_import(tmp_path):
    offender = tmp_path / "bad.py"
    offender.write_text(
        "import flask\nfrom sqlalchemy import select\nfrom service.infra.db import get_session\n"
    )
    assert imported_modules(offender) == {"flask", "sqlalchemy", "service.infra.db"}
