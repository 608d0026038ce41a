"""One loader of ``MODULE:OBJECT`` registries: what it accepts, and what each caller needs."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from airlock.cli import app
from airlock.inventory import (
    RegistryRefError,
    ToolCatalog,
    load_registry,
    load_tool_registry,
)
from airlock.policies import Principal
from airlock.tools import Caller, Registry, ToolDefinition, ToolSpec
from tests.airlock.inventory_registry import POLICY_ARG, REPO, registry

runner = CliRunner()


class LookAlike:
    """Reads like a registry (what the inventory needs) but cannot run tools."""

    def specs(self) -> Sequence[ToolSpec]:
        return registry.specs()

    def visible(self, principal: Principal, caller: Caller) -> Sequence[ToolDefinition]:
        return registry.visible(principal, caller)


look_alike = LookAlike()
HERE = "tests.airlock.inventory.test_registry_ref"


@pytest.fixture(autouse=True)
def _in_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)


Loader = Callable[[str], ToolCatalog]
LOADERS: dict[str, Loader] = {"catalog": load_registry, "tools": load_tool_registry}

# (reference, loader) -> the object's kind, or the reason it is refused
TABLE: list[tuple[str, str, str]] = [
    ("tests.airlock.inventory_registry:registry", "catalog", "Registry"),
    ("tests.airlock.inventory_registry:registry", "tools", "Registry"),
    ("tests.airlock.inventory_registry:build_registry", "catalog", "Registry"),
    ("tests.airlock.inventory_registry:build_registry", "tools", "Registry"),
    (f"{HERE}:look_alike", "catalog", "LookAlike"),
    (f"{HERE}:LookAlike", "catalog", "LookAlike"),
    (f"{HERE}:look_alike", "tools", "is a LookAlike, not a tools.Registry, which can run"),
    ("no_colon_here", "catalog", "expected one ':'"),
    ("no_colon_here", "tools", "expected one ':'"),
    (":registry", "tools", "expected one ':'"),
    ("tests.airlock.not_a_module:registry", "tools", "cannot import"),
    ("tests.airlock.inventory_registry:missing", "tools", "has no 'missing'"),
    ("tests.airlock.inventory_registry:POLICY", "catalog", "is a PosixPath, not a tools.Registry"),
    ("tests.airlock.inventory_registry:POLICY", "tools", "is a PosixPath, not a tools.Registry"),
]


@pytest.mark.parametrize(("ref", "loader", "expected"), TABLE)
def test_loading_a_registry_reference(ref: str, loader: str, expected: str) -> None:
    if " " not in expected:
        found = LOADERS[loader](ref)
        assert type(found).__name__ == expected
        if loader == "tools":
            assert isinstance(found, Registry)
        return
    with pytest.raises(RegistryRefError) as refused:
        LOADERS[loader](ref)
    assert refused.value.code == "registry_ref"
    assert refused.value.ref == ref
    assert expected in str(refused.value)
    assert "write MODULE:OBJECT" in str(refused.value)


# A registry module is the user's code: whatever it raises while it is imported, looked up or
# called is a usage error naming it, never a traceback with the exit status of a grown lock.
# name: (the module's text, the object named, what the refusal says)
FAILING: dict[str, tuple[str, str, str]] = {
    "import raises": ('raise RuntimeError("boom")\n', "registry", "raised RuntimeError: boom"),
    "import exits": ("import sys\nsys.exit(1)\n", "registry", "raised SystemExit: 1"),
    "not Python": ("def (:\n", "registry", "raised SyntaxError"),
    "an import inside fails": ("import tests.airlock.nowhere\n", "registry", "cannot import"),
    "factory raises": ('def make():\n    raise KeyError("x")\n', "make", "raised KeyError: 'x'"),
    "lookup raises": (
        'def __getattr__(name):\n    raise RuntimeError("lazy")\n',
        "registry",
        "raised RuntimeError: lazy",
    ),
    "factory wants arguments": ("def make(a):\n    return a\n", "make", "raised TypeError"),
}


@pytest.mark.parametrize("loader", sorted(LOADERS))
@pytest.mark.parametrize("case", sorted(FAILING))
def test_a_registry_module_that_fails_is_a_usage_error(
    case: str, loader: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text, attribute, fragment = FAILING[case]
    module = f"failing_registry_{sorted(FAILING).index(case)}_{loader}"
    (tmp_path / f"{module}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    ref = f"{module}:{attribute}"
    try:
        with pytest.raises(RegistryRefError) as refused:
            LOADERS[loader](ref)
    finally:
        sys.modules.pop(module, None)
    assert refused.value.code == "registry_ref"
    assert refused.value.ref == ref
    assert fragment in str(refused.value)


# A registry's specs() and its attributes are the user's code too: the loader reads them once,
# so what they raise is a usage error naming the registry, never a traceback later.
# name: (the module's text, what the refusal says)
_CLASS = "class Catalog:\n    def visible(self, principal, caller):\n        return []\n"
BAD_CATALOGS: dict[str, tuple[str, str]] = {
    "specs() raises": (
        _CLASS + '    def specs(self):\n        raise RuntimeError("specs failed")\n'
        "registry = Catalog()\n",
        "calling registry.specs() raised RuntimeError: specs failed",
    ),
    "specs() exits": (
        _CLASS + "    def specs(self):\n        raise SystemExit(3)\nregistry = Catalog()\n",
        "calling registry.specs() raised SystemExit: 3",
    ),
    "specs() gives no sequence": (
        _CLASS + "    def specs(self):\n        return None\nregistry = Catalog()\n",
        "calling registry.specs() raised TypeError",
    ),
    "specs() gives something else than tool specs": (
        _CLASS + "    def specs(self):\n        return [1]\nregistry = Catalog()\n",
        "registry.specs() gave a int, not a tools.ToolSpec",
    ),
    "an attribute lookup raises": (
        "class Catalog:\n    def __getattr__(self, name):\n"
        '        raise RuntimeError("lazy attribute " + name)\nregistry = Catalog()\n',
        "reading 'registry' raised RuntimeError: lazy attribute specs",
    ),
    "a property raises": (
        _CLASS + "    @property\n    def specs(self):\n        raise KeyError('k')\n"
        "registry = Catalog()\n",
        "reading 'registry' raised KeyError: 'k'",
    ),
    "a factory's registry lookup raises": (
        "class Catalog:\n    def __getattr__(self, name):\n        raise ValueError(name)\n"
        "def make():\n    return Catalog()\nregistry = make\n",
        "reading 'registry' raised ValueError: specs",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CATALOGS))
def test_a_registry_whose_specs_fail_is_a_usage_error(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text, fragment = BAD_CATALOGS[case]
    module = f"bad_catalog_{sorted(BAD_CATALOGS).index(case)}"
    (tmp_path / f"{module}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    ref = f"{module}:registry"
    try:
        with pytest.raises(RegistryRefError) as refused:
            load_registry(ref)
        inventory = runner.invoke(app, ["inventory", "--registry", ref, "--policy", POLICY_ARG])
        program = tmp_path / "program.py"
        program.write_text("tools.x()\n")
        effects = runner.invoke(
            app, ["program-effects", str(program), "--registry", ref, "--policy", POLICY_ARG]
        )
    finally:
        sys.modules.pop(module, None)
    assert refused.value.code == "registry_ref"
    assert fragment in str(refused.value)
    for result in (inventory, effects):
        assert result.exit_code == 2, result.output
        assert "error (registry_ref)" in result.output
        assert fragment in result.output
