"""The composition root reaches the sandbox only through its public API: no module under
``airlock/`` imports the Docker SDK, its HTTP stack or a private ``airlock.sandbox._x``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "airlock"
FORBIDDEN = ("docker", "requests")


def _imports(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


MODULES = sorted(ROOT.rglob("*.py"))


def test_the_composition_root_is_found() -> None:
    assert len(MODULES) > 20
    assert ROOT / "inventory" / "_sandbox_effects.py" in MODULES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_no_docker_and_no_private_sandbox_module(path: Path) -> None:
    bad = [
        f"line {line}: {name}"
        for line, name in _imports(path)
        if name.split(".", 1)[0] in FORBIDDEN or name.startswith("airlock.sandbox._")
    ]
    assert bad == [], "use airlock.sandbox's public API (describe_container, check_engine, ...)"
