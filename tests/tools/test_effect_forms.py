"""A write's effect as a person approves it and as commit sends it: its JSON form in the
ledger. An effect that form cannot hold is refused at prepare; a stored effect that no longer
builds the tool's model fails its step with a code, never a traceback."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, field_serializer

from airlock.policies import ApprovalPolicy, ApprovalRule, Grant, Principal, write
from airlock.tools import (
    CallContext,
    Registry,
    SQLiteLedgerStore,
    ToolError,
    WritePath,
    write_tool,
)

pytestmark = pytest.mark.anyio

TOOL = "orders_order_ship"
ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"orders.write"}))
GRANT = Grant(scopes=frozenset({"orders.write"}), effects=(write("orders:order/*"),))
ALLOW = ApprovalPolicy((ApprovalRule(id="auto", action="allow"),))


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    order_id: Annotated[str, Field(max_length=20, pattern=r"^o[0-9]+$")]


class Receipt(BaseModel):
    id: str


def _strict(name: str, kind: Any) -> type[BaseModel]:
    """A strict effect model (as input models are) with one field of ``kind``."""
    fields: dict[str, Any] = {"order_id": (str, ...), "value": (kind, ...)}
    return type(  # type: ignore[no-any-return]
        name,
        (BaseModel,),
        {
            "model_config": ConfigDict(extra="forbid", strict=True),
            "__annotations__": {k: v[0] for k, v in fields.items()},
        },
    )


class Lossy(BaseModel):
    """Its JSON form drops what makes two effects differ."""

    order_id: str
    value: float

    @field_serializer("value")
    def _rounded(self, value: float) -> float:
        return round(value)


class World:
    def __init__(self, root: Path, effect_model: type[BaseModel], value: Any) -> None:
        self.sent: list[tuple[BaseModel, str]] = []
        self.ledger = SQLiteLedgerStore(root / "ledger.db")
        self.writes = self.path(effect_model, value)

    def path(self, effect_model: type[BaseModel], value: Any) -> WritePath:
        """A write path over the world's ledger whose tool has ``effect_model``."""

        def prepare(args: Args, _principal: Principal) -> BaseModel:
            return effect_model.model_validate({"order_id": args.order_id, "value": value})

        def commit(effect: BaseModel, key: str) -> dict[str, str]:
            self.sent.append((effect, key))
            return {"id": "shipped"}

        registry = Registry()
        registry.register(
            write_tool(
                name=TOOL,
                description="Ship an order. Use it to ship one order. It does not refund.",
                input_model=Args,
                effect_model=effect_model,
                receipt_model=Receipt,
                prepare=prepare,
                commit=commit,
                summarize=lambda effect: f"ship {effect.order_id}",
                effects=[write("orders:order/{order_id}")],
                scope="orders.write",
            )
        )
        return WritePath(registry, self.ledger)

    async def prepare(self, writes: WritePath | None = None) -> Any:
        ctx = CallContext(
            principal=ALICE, grant=GRANT, run_id="run_1", caller="direct", approvals=ALLOW
        )
        return await (writes or self.writes).preview_call(TOOL, {"order_id": "o1"}, ctx)


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (dt.datetime, dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC)),
        (dt.date, dt.date(2030, 1, 2)),
        (Decimal, Decimal("12.50")),
        (uuid.UUID, uuid.UUID(int=7)),
        (tuple[int, int], (1, 2)),
    ],
    ids=["datetime", "date", "decimal", "uuid", "tuple"],
)
async def test_a_strict_effect_whose_json_spells_strings_commits_as_prepared(
    tmp_path: Path, kind: Any, value: Any
) -> None:
    world = World(tmp_path, _strict("Effect", kind), value)
    preview = await world.prepare()
    assert preview.state == "approved"

    receipt = await world.writes.commit(preview.id, preview.fingerprint, ALICE)

    assert receipt.data == {"id": "shipped"}
    [(effect, _)] = world.sent
    assert effect.value == value  # type: ignore[attr-defined]
    world.ledger.close()


@pytest.mark.parametrize(
    ("effect_model", "value", "why"),
    [
        (_strict("Effect", float), float("nan"), "ValueError"),
        (_strict("Effect", float), float("inf"), "ValueError"),
        (Lossy, 1.4, "rebuilds a different effect"),
    ],
    ids=["nan", "infinity", "lossy serializer"],
)
async def test_an_effect_its_json_form_cannot_hold_is_refused_at_prepare(
    tmp_path: Path, effect_model: type[BaseModel], value: Any, why: str
) -> None:
    world = World(tmp_path, effect_model, value)

    with pytest.raises(ToolError) as refused:
        await world.prepare()

    assert refused.value.code == "upstream"
    assert why in (refused.value.detail or "")
    assert world.ledger.previews(limit=10) == []
    world.ledger.close()


async def test_a_stored_effect_the_tools_model_no_longer_fits_fails_its_step(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, _strict("Effect", int), 3)
    preview = await world.prepare()
    # Deployed since: the tool's effect model asks for another type.
    redeployed = world.path(_strict("Effect", dt.datetime), dt.datetime.now(dt.UTC))

    with pytest.raises(ToolError) as refused:
        await redeployed.commit(preview.id, preview.fingerprint, ALICE)

    assert refused.value.code == "upstream"
    stored = world.ledger.preview(preview.id)
    assert stored is not None
    assert (stored.state, stored.error) == ("failed", "upstream")
    assert world.sent == []
    assert await redeployed.reconcile() == []  # nothing left half-done
    world.ledger.close()
