"""A write's declared effects are judged against the grant before its ``prepare`` reads the
system of record: a grant that can cover no call of the tool answers ``denied`` for an
existing record and a missing one alike, and prepare never runs. A grant that may cover some
call lets prepare run and judges what it computed; when prepare finds no record, the effects
the input names are judged as the found record's would be (the grant, and the deny rules
that need no amount), so no answer tells whether a record exists."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from airlock.policies import (
    ApprovalPolicy,
    ApprovalRule,
    Grant,
    Principal,
    disclose,
    read,
    write,
)
from airlock.tools import (
    CallContext,
    NotFoundError,
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

    async def outcome(self, invoice_id: str, grant: Grant, *rules: ApprovalRule) -> tuple[str, str]:
        approvals = ApprovalPolicy(rules=rules)
        ctx = CallContext(
            principal=ACME, grant=grant, run_id="r1", caller="direct", approvals=approvals
        )
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
# cannot cover any call of the write answers the same for the record that exists and the one
# that does not, and reads neither. One that may cover some call (a record it names, which
# prepare may compute from another id) lets prepare read, and answers alike all the same.
CASES = [
    ("no write effect", _grant(read("billing:invoice/*")), "denied", 0),
    ("write elsewhere", _grant(write("crm:contact/*")), "denied", 0),
    ("no spend limit", _grant(write("billing:refund/*"), limits={}), "denied", 0),
    ("write of another record", _grant(write("billing:refund/inv_public")), "denied", 1),
    # The amount is what prepare computes: a limit, even of 0, may cover some refund.
    ("zero spend limit", _grant(write("billing:refund/*"), limits={"USD": 0}), None, 1),
    ("write of every refund", _grant(write("billing:refund/*")), None, 1),
]


def _alike(existing: tuple[str, str], missing: tuple[str, str]) -> bool:
    """Whether two answers are the same but for the invoice id each call sent."""
    return existing[0] == missing[0] and (
        existing[1].replace("inv_secret1", "ID") == missing[1].replace("inv_nosuch", "ID")
    )


@pytest.mark.parametrize(("label", "grant", "refused", "reads"), CASES, ids=[c[0] for c in CASES])
async def test_a_write_the_grant_does_not_cover_answers_alike_for_any_record(
    world: World, label: str, grant: Grant, refused: str | None, reads: int
) -> None:
    existing = await world.outcome("inv_secret1", grant)
    missing = await world.outcome("inv_nosuch", grant)

    if refused is not None:
        assert existing[0] == refused
        assert _alike(existing, missing), (existing, missing)
    else:  # covered: prepare runs for both, and the missing record is not_found
        assert missing[0] == "not_found"
        assert existing[0] != "not_found"
    assert world.invoices.reads == 2 * reads


@pytest.mark.parametrize(
    ("invoice_id", "expected", "reads"),
    [("inv_secret1", "preview", 1), ("inv_nosuch", "denied", 1)],
)
async def test_an_input_field_that_fills_the_write_judges_a_missing_record(
    world: World, invoice_id: str, expected: str, reads: int
) -> None:
    grant = _grant(write("billing:refund/inv_secret1"))

    code, _ = await world.outcome(invoice_id, grant)

    assert code == expected
    assert world.invoices.reads == reads


async def test_a_missing_record_outside_the_grant_is_audited_as_an_existing_one(
    world: World,
) -> None:
    grant = _grant(write("billing:refund/inv_public"))
    await world.outcome("inv_secret1", grant)
    await world.outcome("inv_nosuch", grant)

    existing, missing = world.registry.audit.events()
    assert (missing.stage, missing.decision, missing.rule, missing.code) == (
        existing.stage,
        existing.decision,
        existing.rule,
        existing.code,
    )
    assert (missing.decision, missing.rule, missing.code) == ("deny", "grant", "denied")
    assert missing.effects == ("write(billing:refund/inv_nosuch)",)
    assert missing.outcome == "error"


# (label, the policy's rule, the answer for the record that exists, for the one that does
# not). A deny rule that needs no amount judges the record the input names when prepare
# finds none; one that needs prepare's amount or currency cannot, and leaves not_found.
RULES = [
    (
        "deny on the record's target",
        ApprovalRule(id="r", action="deny", effect="write", targets=("billing:refund/inv_*",)),
        "denied",
        "denied",
    ),
    ("deny on the tool", ApprovalRule(id="r", action="deny", tools=(TOOL,)), "denied", "denied"),
    (
        "deny on every write",
        ApprovalRule(id="r", action="deny", effect="write"),
        "denied",
        "denied",
    ),
    (
        "deny on every spend",
        ApprovalRule(id="r", action="deny", effect="spend"),
        "denied",
        "denied",
    ),
    (
        "deny on another record",
        ApprovalRule(id="r", action="deny", effect="write", targets=("billing:refund/inv_vip*",)),
        "preview",
        "not_found",
    ),
    (
        "deny from an amount",
        ApprovalRule(id="r", action="deny", min_amount=1),
        "denied",
        "not_found",
    ),
    (
        "deny in a currency",
        ApprovalRule(id="r", action="deny", currency="USD"),
        "denied",
        "not_found",
    ),
    ("ask on the tool", ApprovalRule(id="r", action="ask", tools=(TOOL,)), "preview", "not_found"),
]


@pytest.mark.parametrize(
    ("label", "rule", "existing_code", "missing_code"), RULES, ids=[r[0] for r in RULES]
)
async def test_a_deny_rule_answers_alike_for_a_missing_record_when_it_needs_no_amount(
    world: World, label: str, rule: ApprovalRule, existing_code: str, missing_code: str
) -> None:
    grant = _grant(write("billing:refund/*"))

    existing = await world.outcome("inv_secret1", grant, rule)
    missing = await world.outcome("inv_nosuch", grant, rule)

    assert (existing[0], missing[0]) == (existing_code, missing_code)
    if missing_code == "denied":
        assert _alike(existing, missing), (existing, missing)
        first, second = world.registry.audit.events()
        assert (first.stage, first.decision, first.rule, first.code) == (
            second.stage,
            second.decision,
            second.rule,
            second.code,
        )
        assert (second.decision, second.rule) == ("deny", "r")
    assert world.invoices.reads == 2


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
        effects=(write("crm:contact/*"),),
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


class CloseArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    invoice_id: Annotated[str, Field(max_length=20, pattern=r"^[A-Za-z0-9_-]+$")]


class Close(BaseModel):
    invoice_id: str


# What prepare finds for an input id: the record under its own id (normalised, or another
# one the same-named input stands for).
RECORDS = {"INV-1": "inv_1", "OLD-7": "inv_42"}

# (the grant's write effect, the invoice id sent, the answer). The grant judges the record
# prepare computed; the input's form judges only a record prepare does not find.
NORMALISED = [
    ("normalised id the grant covers", "crm:invoice/inv_1", "INV-1", "preview"),
    ("input names another record", "crm:invoice/inv_42", "OLD-7", "preview"),
    ("the grant covers the input's form only", "crm:invoice/INV-1", "INV-1", "denied"),
    ("missing, outside the grant", "crm:invoice/inv_1", "INV-2", "denied"),
    ("missing, inside the grant", "crm:invoice/*", "INV-2", "not_found"),
]


@pytest.mark.parametrize(
    ("label", "granted", "invoice_id", "expected"), NORMALISED, ids=[n[0] for n in NORMALISED]
)
async def test_the_record_prepare_computes_is_judged_not_the_input_s_form(
    tmp_path: Path, label: str, granted: str, invoice_id: str, expected: str
) -> None:
    looked_up: list[str] = []

    def prepare(args: CloseArgs, principal: Principal) -> Close:
        looked_up.append(args.invoice_id)
        if args.invoice_id not in RECORDS:
            raise NotFoundError(detail=f"no invoice {args.invoice_id}")
        return Close(invoice_id=RECORDS[args.invoice_id])

    registry = Registry()
    registry.register(
        write_tool(
            name="crm_invoice_close",
            description="Close an invoice. Use it when it was paid. It returns the id only.",
            input_model=CloseArgs,
            effect_model=Close,
            receipt_model=Close,
            prepare=prepare,
            commit=lambda effect, key: {"invoice_id": effect.invoice_id},
            effects=[write("crm:invoice/{invoice_id}")],
            scope="crm.write",
        )
    )
    principal = Principal(user_id="u", tenant_id="acme", scopes=frozenset({"crm.write"}))
    grant = Grant(scopes=frozenset({"crm.write"}), effects=(write(granted),))
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    ctx = CallContext(principal=principal, grant=grant, run_id="r", caller="direct")
    try:
        await WritePath(registry, ledger).call("crm_invoice_close", {"invoice_id": invoice_id}, ctx)
        code = "preview"
    except ToolError as exc:
        code = exc.code
    finally:
        ledger.close()

    assert code == expected
    assert looked_up == [invoice_id]
    (event,) = registry.audit.events()
    assert event.code == ("needs_approval" if expected == "preview" else expected)
