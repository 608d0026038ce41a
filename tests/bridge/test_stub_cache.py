"""The stubs a run frame carries are made once for each principal's scopes and the names asked
for, while the registry has the same tools: what is kept never outlives a change of the tools,
never crosses to a principal of other scopes, and stays bounded."""

from __future__ import annotations

import gc
import json
from dataclasses import asdict
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from airlock.bridge import ToolStub, proposal_stubs, tool_stubs
from airlock.bridge._stub_cache import KEPT_PER_REGISTRY, kept_count
from airlock.policies import Principal, read
from airlock.tools import CallContext, Registry
from tests.bridge.records import ALICE, build_registry

ADMIN = Principal(
    user_id="root", tenant_id="acme", scopes=frozenset({"records.read", "records.admin"})
)
NOBODY = Principal(user_id="eve", tenant_id="acme", scopes=frozenset())


class _Count(BaseModel):
    n: int


def _names(stubs: list[ToolStub]) -> list[str]:
    return [stub.name for stub in stubs]


def _add_tool(registry: Registry, name: str, scope: str = "records.read") -> None:
    @registry.tool(
        effects=[read("records:extra/{n}")], scope=scope, callers={"direct", "code"}, name=name
    )
    async def extra(ctx: CallContext, n: int) -> _Count:
        """Return an extra count. Use it in tests of stubs. It returns nothing else."""
        return _Count(n=n)


def test_what_is_kept_is_what_would_be_made_anew() -> None:
    registry = build_registry()
    kept = tool_stubs(registry, ALICE)
    assert tool_stubs(registry, ALICE) == kept
    assert tool_stubs(build_registry(), ALICE) == kept  # another registry: made anew


def test_a_tool_registered_later_is_in_the_next_stubs() -> None:
    registry = build_registry()
    before = _names(tool_stubs(registry, ALICE))
    _add_tool(registry, "records_extra_get")
    after = _names(tool_stubs(registry, ALICE))
    assert after == sorted([*before, "records_extra_get"])


@pytest.mark.parametrize(
    ("principal", "names", "present", "absent"),
    [
        (ALICE, None, "records_item_get", "records_secret_get"),
        (ADMIN, None, "records_secret_get", "records_item_delete"),
        (ADMIN, {"records_secret_get"}, "records_secret_get", "records_item_get"),
        (ALICE, ["records_secret_get"], None, "records_secret_get"),
        (NOBODY, None, None, "records_item_get"),
    ],
)
def test_stubs_follow_scopes_and_names_on_one_registry(
    principal: Principal, names: object, present: str | None, absent: str
) -> None:
    registry = build_registry()
    for first in (ALICE, ADMIN, NOBODY):  # whatever was kept before, for others
        tool_stubs(registry, first)
        tool_stubs(registry, first, names={"records_item_get"})
    got = _names(tool_stubs(registry, principal, names=names))  # type: ignore[arg-type]
    assert absent not in got
    assert present is None or present in got


def test_proposals_are_kept_apart_from_tools() -> None:
    registry = build_registry()
    names = {"records_item_get"}
    assert tool_stubs(registry, ALICE, names=names) != []
    # The same key but for the kind: a read tool is no proposal.
    assert proposal_stubs(registry, ALICE, names=names) == []


def test_each_caller_gets_a_list_of_its_own() -> None:
    registry = build_registry()
    first = tool_stubs(registry, ALICE)
    first.clear()
    assert tool_stubs(registry, ALICE) != []


def test_what_is_kept_is_bounded_and_goes_with_its_registry() -> None:
    registry = build_registry()
    for n in range(KEPT_PER_REGISTRY + 20):
        user = Principal(
            user_id="u", tenant_id="acme", scopes=frozenset({"records.read", f"scope.{n}"})
        )
        tool_stubs(registry, user)
    assert kept_count(registry) == KEPT_PER_REGISTRY
    before = kept_count()
    del registry
    gc.collect()
    assert kept_count() < before


def test_wire_form_is_the_stub_as_json() -> None:
    """What the guest receives is the stub's fields as JSON, as a round trip through the
    encoder would make them (defaults shown or not, descriptions, kinds)."""
    registry = build_registry()

    @registry.tool(
        effects=[read("records:shaped/{n}")], scope="records.read", callers={"direct", "code"}
    )
    async def records_shaped_get(
        ctx: CallContext,
        n: int,
        order: Literal["asc", "desc"] = "asc",
        limit: Annotated[int, Field(ge=1, le=100, description="how many")] = 10,
    ) -> _Count:
        """Return a shaped count. Use it in tests of stubs. It returns nothing else."""
        return _Count(n=n)

    stubs = tool_stubs(registry, ADMIN) + proposal_stubs(
        build_registry(), ADMIN, names={"records_item_delete"}
    )
    assert stubs
    for stub in stubs:
        assert stub.to_wire() == json.loads(json.dumps(asdict(stub))), stub.name
