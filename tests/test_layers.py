"""The house, checked from the imports: packages point one way, nothing reaches into another
package's private modules, rooms of the composition root meet through their public API, the
guest uses the standard library only, and long modules say why they are long.

    policies ← tools ← bridge ← sandbox ← airlock (harness ← frontends, inventory ← cli)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Where each package of the airlock namespace lives, and what it may import, bottom up.
FOLDERS = {
    "airlock.policies": REPO / "policies",
    "airlock.tools": REPO / "tools",
    "airlock.bridge": REPO / "bridge",
    "airlock.sandbox": REPO / "sandbox",
}
ORDER = ["airlock.policies", "airlock.tools", "airlock.bridge", "airlock.sandbox", "airlock"]
ROOMS = ["airlock.harness", "airlock.frontends", "airlock.inventory", "airlock.cli"]
ROOM_MAY_USE = {
    "airlock.harness": set(),
    "airlock.frontends": {"airlock.harness"},
    "airlock.inventory": {"airlock.harness"},
    "airlock.cli": {"airlock.harness", "airlock.frontends", "airlock.inventory"},
}
GUEST = REPO / "sandbox" / "guest"
# Guest modules import each other by file name inside the image.
GUEST_MODULES = {p.stem for p in GUEST.glob("airlock_*.py")} | {
    "airlock_wire",
    "RestrictedPython",
    "pyseccomp",  # libseccomp's binding, for the second seccomp layer
}
LONG = 400


def _module_of(path: Path) -> str:
    for package, folder in FOLDERS.items():
        if path.is_relative_to(folder):
            parts = path.relative_to(folder).with_suffix("").parts
            return ".".join((package, *parts)).removesuffix(".__init__")
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def _imports(path: Path) -> list[tuple[int, str]]:
    """Absolute imports of a module, as ``module`` and ``module.name`` (TYPE_CHECKING ones
    included: a type needed from above is a dependency too)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _package_of(module: str) -> str:
    for package in ORDER[:-1]:
        if module == package or module.startswith(package + "."):
            return package
    return "airlock"


def _room_of(module: str) -> str | None:
    return next((r for r in ROOMS if module == r or module.startswith(r + ".")), None)


LIBRARY = sorted(
    p
    for folder in [*FOLDERS.values(), REPO / "airlock"]
    for p in folder.rglob("*.py")
    if not p.is_relative_to(GUEST)
)


def test_every_package_is_found() -> None:
    found = {_package_of(_module_of(p)) for p in LIBRARY}
    assert found == set(ORDER)
    assert len(LIBRARY) > 100
    assert sorted(p.name for p in GUEST.glob("*.py"))


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(REPO)))
def test_imports_point_down_and_stay_out_of_private_modules(path: Path) -> None:
    me = _module_of(path)
    mine = _package_of(me)
    room = _room_of(me)
    bad = []
    for line, name in _imports(path):
        if not name.startswith("airlock"):
            continue
        theirs = _package_of(name)
        if ORDER.index(theirs) > ORDER.index(mine):
            bad.append(f"line {line}: {name} is above {mine}")
        private = any(part.startswith("_") for part in name.split(".")[1:-1])
        if theirs != mine and private:
            bad.append(f"line {line}: {name} is private to {theirs}")
        other_room = _room_of(name)
        if mine == "airlock" and other_room is not None and other_room != room:
            if room is not None and other_room not in ROOM_MAY_USE[room]:
                bad.append(f"line {line}: room {room} may not use {other_room}")
            if private:
                bad.append(f"line {line}: {name} is private to {other_room}")
    assert bad == []


@pytest.mark.parametrize("path", sorted(GUEST.glob("*.py")), ids=lambda p: p.name)
def test_the_guest_uses_the_standard_library_only(path: Path) -> None:
    outside = sorted(
        {
            name.split(".", 1)[0]
            for _, name in _imports(path)
            if not name.startswith("airlock.")  # type-checking names of the host's copy
        }
        - set(sys.stdlib_module_names)
        - GUEST_MODULES
        - {"__future__"}
    )
    assert outside == []


@pytest.mark.parametrize(
    "path",
    [p for p in [*LIBRARY, *GUEST.glob("*.py")] if len(p.read_text().splitlines()) > LONG],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_a_long_module_says_why_in_its_docstring(path: Path) -> None:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    assert "one module" in doc, f"{path.name} is over {LONG} lines: split it or say why"
