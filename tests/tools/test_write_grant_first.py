"""A write's declared effects are judged against the grant before its ``prepare`` reads the
system of record: a grant that cannot cover them answers ``denied`` for an existing record
and a missing one alike, and prepare never runs (no answer tells whether a record exists)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from airlock.policies import Grant, Principal, disclose, read, write
from airlock.tools import (
    CallContext,
    Preview,
    Registry,
    SQLiteLedgerStore,
    ToolError,
    WritePath,
    write_tool,
)
from airlock.tools.testing import SystemOfRecord, refund_tool

pytestmark = pytest.mark.anyio

TOOL = "billing_refund_create"
ACME = Principal(user_id="u", tenant_id="acme", scopes=frozenset({"billing.write", "mail.send"}))
INVOICE = {"tenant_id": "acme", "amount_minor": 1234, "currency": "USD", "customer": "cus_1"}
SCOPES = frozenset({"billing.write", "mail.send"})
LIMIT = {"USD": 100_000}


class CountedInvoices(dict[str, Any]):
    """The invoices prepare reads, counting every read."""

    reads: int = 0

    def get(self, key: str, default: Any = None) -> Any:
        self.reads += 1
        return super().get(key, default)


class World:
    def __init__(self, tmp_path: Path) -> None:
        self.invoices = CountedInvoices({"inv_secret1": INVOICE})
        self.system = SystemOfRecord(tmp_path / "sor.db")
        self.registry = Registry()
        self.registry.register(refund_tool(self.system, self.invoices))
        self.ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
        self.writes = WritePath(self.registry, self.ledger)

    async def outcome(self, invoice_id: str, grant: Grant) -> tuple[str, str]:
        ctx = CallContext(principal=ACME, grant=grant, run_id="r1", caller="direct")
        try:
            answer = await self.writes.call(
                TOOL, {"invoice_id": invoice_id, "reason": "duplicate"}, ctx
            )
        except ToolError as exc:
            return exc.code, exc.message
        assert isinstance(answer, Preview)
        return "preview", answer.state

    def close(self) -> None:
        self.ledger.close()
        self.system.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.close()


def _grant(*effects: Any, limits: dict[str, int] | None = None) -> Grant:
    return Grant(scopes=SCOPES, effects=effects, spend_limits=LIMIT if limits is None else limits)


# (label, grant, the code of a refusal or None, prepare's reads per call). A grant that
# cannot cover the write answers the same for the record that exists and the one that does
# not, and reads neither.
CASES = [
    ("no write effect", _grant(read("billing:invoice/*")), "denied", 0),
    ("write elsewhere", _grant(write("crm:contact/*")), "denied", 0),
    ("write of another record", _grant(write("billing:refund/inv_public")), "denied", 0),
    ("no spend limit", _grant(write("billing:refund/*"), limits={}), "denied", 0),
    # The amount is what prepare computes: a limit, even of 0, may cover some refund.
    ("zero spend limit", _grant(write("billing:refund/*"), limits={"USD": 0}), None, 1),
    ("write of every refund", _grant(write("billing:refund/*")), None, 1),
]


@pytest.mark.parametrize(("label", "grant", "refused", "reads"), CASES, ids=[c[0] for c in CASES])
async def test_a_write_the_grant_cannot_cover_is_denied_before_prepare_reads_anything(
    world: World, label: str, grant: Grant, refused: str | None, reads: int
) -> None:
    existing = await world.outcome("inv_secret1", grant)
    missing = await world.outcome("inv_nosuch", grant)

    if refused is not None:
        assert existing[0] == missing[0] == refused
        assert world.invoices.reads == 0
    else:  # covered: prepare runs for both, and the missing record is not_found
        assert missing[0] == "not_found"
        assert existing[0] != "not_found"
        assert world.invoices.reads == 2 * reads


@pytest.mark.parametrize(
    ("invoice_id", "expected", "reads"),
    [("inv_secret1", "preview", 1), ("inv_nosuch", "denied", 0)],
)
async def test_an_input_field_that_fills_the_write_is_judged_exactly_before_prepare(
    world: World, invoice_id: str, expected: str, reads: int
) -> None:
    grant = _grant(write("billing:refund/inv_secret1"))

    code, _ = await world.outcome(invoice_id, grant)

    assert code == expected
    assert world.invoices.reads == reads


async def test_the_refusal_before_prepare_is_audited_once_as_the_grant_s(world: World) -> None:
    code, message = await world.outcome("inv_nosuch", _grant(read("billing:invoice/*")))

    (event,) = world.registry.audit.events()
    assert code == "denied"
    assert "outside this run's grant" in message
    assert (event.stage, event.decision, event.rule, event.code) == (
        "authorize",
        "deny",
        "grant",
        "denied",
    )


async def test_a_missing_spend_limit_is_audited_as_the_spend_rule(world: World) -> None:
    await world.outcome("inv_nosuch", _grant(write("billing:refund/*"), limits={}))

    (event,) = world.registry.audit.events()
    assert (event.rule, event.code) == ("spend", "denied")


class MailArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    contact_id: Annotated[str, Field(max_length=40)]


class Mail(BaseModel):
    to: str


class Sent(BaseModel):
    to: str


@pytest.mark.parametrize(
    ("grant_effects", "refused"),
    [
        ((), True),
        ((disclose("slack:*"),), True),
        ((disclose("email:*@acme.com"),), False),
    ],
)
async def test_a_disclosure_the_grant_cannot_cover_is_denied_before_prepare(
    tmp_path: Path, grant_effects: tuple[Any, ...], refused: bool
) -> None:
    looked_up: list[str] = []

    def prepare(args: MailArgs, principal: Principal) -> Mail:
        looked_up.append(args.contact_id)
        return Mail(to="bob@acme.com")

    registry = Registry()
    registry.register(
        write_tool(
            name="mail_message_send",
            description="Mail a contact. Use it to write to one. It returns the address only.",
            input_model=MailArgs,
            effect_model=Mail,
            receipt_model=Sent,
            prepare=prepare,
            commit=lambda effect, key: {"to": effect.to},
            effects=[disclose("email:{to}")],
            scope="mail.send",
        )
    )
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    writes = WritePath(registry, ledger)
    ctx = CallContext(principal=ACME, grant=_grant(*grant_effects), run_id="r", caller="direct")
    try:
        await writes.call("mail_message_send", {"contact_id": "c_1"}, ctx)
        code = "preview"
    except ToolError as exc:
        code = exc.code
    finally:
        ledger.close()

    assert (code == "denied") is refused
    assert looked_up == ([] if refused else ["c_1"])


async def test_a_program_s_proposal_is_judged_before_prepare_too(tmp_path: Path) -> None:
    invoices = CountedInvoices({"inv_secret1": INVOICE})
    system = SystemOfRecord(tmp_path / "sor.db")
    registry = Registry()
    registry.register(refund_tool(system, invoices, proposable=True))
    grant = Grant(
        scopes=SCOPES,
        effects=(write("billing:refund/inv_public"),),
        spend_limits=LIMIT,
        propose=frozenset({"billing_refund_*"}),
    )
    ctx = CallContext(principal=ACME, grant=grant, run_id="r", caller="code")
    codes = []
    for invoice_id in ("inv_secret1", "inv_nosuch"):
        with pytest.raises(ToolError) as caught:
            registry.admit(
                TOOL, {"invoice_id": invoice_id, "reason": "duplicate"}, ctx, proposal=True
            )
        codes.append(caught.value.code)
    system.close()

    assert codes == ["denied", "denied"]
    assert invoices.reads == 0
