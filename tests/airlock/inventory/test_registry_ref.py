"""One loader of ``MODULE:OBJECT`` registries: what it accepts, and what each caller needs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from airlock.inventory import (
    RegistryRefError,
    ToolCatalog,
    load_registry,
    load_tool_registry,
)
from airlock.policies import Principal
from airlock.tools import Caller, Registry, ToolDefinition, ToolSpec
from tests.airlock.inventory_registry import REPO, registry


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
