"""What admission makes on every call is made the cheap way, and is exactly what the plain way
makes: the audit event, the admission, the argument hash, the shaped result, the default
authorization, and the deadline of a handler that waits only after its first step."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from airlock.policies import ApprovalPolicy, Effect, Grant, Principal, network, read, spend
from airlock.tools import (
    AuditEvent,
    AuditLog,
    CallContext,
    MemoryAuditStore,
    Observations,
    Registry,
    RunAuthority,
    Secret,
    ToolError,
    audit_event,
)
from airlock.tools._admission import (
    Admission,
    CallTrail,
    _AdmissionBuilder,
    authorize,
    new_admission,
)
from airlock.tools._arguments import hash_input, validate_arguments, validated_args_hash
from airlock.tools._audit import _EventBuilder
from airlock.tools._context import _ContextBuilder
from airlock.tools._redact import escape_controls, redact
from airlock.tools._shaping import shape_result, shape_with
from tests.tools.billing import ALICE, FULL_GRANT, context

InvoiceId = Annotated[str, Field(pattern=r"^inv_[a-z0-9]{1,32}$", max_length=36)]

BUILDERS: list[tuple[type, type]] = [
    (_EventBuilder, AuditEvent),
    (_AdmissionBuilder, Admission),
    (_ContextBuilder, CallContext),
]
"""Each class that makes a frozen record without its dataclass ``__init__``, and the record."""


@pytest.mark.parametrize(("builder", "record"), BUILDERS, ids=lambda c: c.__name__)
def test_a_builder_has_the_layout_and_field_order_of_its_record(
    builder: type, record: type
) -> None:
    # The class of an object may be assigned only between the same layouts; the positional
    # order of the builder is the dataclass's field order.
    assert builder.__slots__ == record.__slots__
    assert tuple(f.name for f in dataclasses.fields(record)) == record.__slots__


class Checked(BaseModel):
    invoice_id: str


def _admission_fields() -> dict[str, Any]:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))
    trail = CallTrail(registry.audit, "billing_invoice_get", {}, context())
    return {
        "spec": None,
        "input": Checked(invoice_id="inv_1"),
        "values": {"invoice_id": "inv_1"},
        "effects": (read("billing:invoice/inv_1"),),
        "trail": trail,
        "needs_approval": True,
    }


def test_an_admission_made_cheaply_is_a_frozen_admission_like_any_other() -> None:
    fields = _admission_fields()
    made = new_admission(**fields)
    assert type(made) is Admission
    assert made == Admission(**fields)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.needs_approval = False  # type: ignore[misc]


def test_a_runs_context_of_a_call_is_a_frozen_call_context_like_any_other() -> None:
    authority = RunAuthority(principal=ALICE, grant=FULL_GRANT, observations=Observations())
    made = authority.context("code", "call_7", deadline=12.5)
    assert type(made) is CallContext
    assert made == CallContext(
        principal=ALICE,
        grant=FULL_GRANT,
        run_id=authority.run_id,
        caller="code",
        call_id="call_7",
        deadline=12.5,
        approvals=authority.approvals,
        observations=authority.observations,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.caller = "direct"  # type: ignore[misc]


@pytest.mark.parametrize("caller", ["model", "", None, "CODE"])
def test_a_runs_context_refuses_an_unknown_caller_as_call_context_does(caller: Any) -> None:
    authority = RunAuthority(principal=ALICE, grant=FULL_GRANT)
    with pytest.raises(ValueError, match="must be one of") as built:
        CallContext(principal=ALICE, grant=FULL_GRANT, run_id="r", caller=caller)
    with pytest.raises(ValueError, match="must be one of") as made:
        authority.context(caller, "call_1")
    assert str(made.value) == str(built.value)


class Who:
    principal = Principal(user_id="alice", tenant_id="acme")
    run_id = "run_1"
    call_id = "call_1"
    caller = "code"


EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("printable", {"tool": "billing_invoice_get", "rule": "default"}),
    ("a newline in the tool name", {"tool": "billing\ninvoice", "rule": "default"}),
    ("an escape in the rule", {"tool": "billing_invoice_get", "rule": "rule\x1b[2J"}),
    ("effects as text, one not printable", {"effects": ("read(a:b/c)", "write(a:b/\u2028)")}),
    ("effects as effects", {"effects": (read("billing:invoice/inv_1"), read("a:b/*"))}),
    ("one effect", {"effects": (read("billing:invoice/inv_1"),)}),
    ("one spend", {"effects": (spend(1200, currency="USD"),)}),
    ("one network effect", {"effects": (network("https://api.example.com/x"),)}),
    ("one effect as text, not printable", {"effects": ("read(a:b/\x1b[2J)",)}),
    ("one effect in a list", {"effects": [read("billing:invoice/inv_1")]}),
    ("no effects", {"effects": ()}),
    ("a credential in the detail", {"detail": "Authorization: Bearer abcdefgh1234\nnext"}),
    ("an error", {"outcome": "error", "code": "denied", "stage": "authorize"}),
    ("not final, at a given time", {"final": False, "ts": 1234.5, "duration_s": 0.25}),
]


@pytest.mark.parametrize(("case", "given"), EVENTS, ids=[c for c, _ in EVENTS])
def test_an_audit_event_holds_exactly_what_the_plain_record_would(
    case: str, given: dict[str, Any]
) -> None:
    """The oracle is the plain dataclass with the rules of :func:`audit_event` applied one
    by one: control characters escaped in tool, rule, effects and detail, credentials
    redacted from the detail."""
    kw: dict[str, Any] = {
        "tool": "billing_invoice_get",
        "stage": "done",
        "decision": "allow",
        "rule": "grant",
        "outcome": "ok",
        "args_hash": "0" * 32,
        **given,
    }
    made = audit_event(Who(), **kw)
    assert type(made) is AuditEvent
    detail = kw.get("detail")
    expected = AuditEvent(
        ts=kw.get("ts", made.ts),
        run_id="run_1",
        call_id="call_1",
        caller="code",
        tool=escape_controls(kw["tool"]),
        user_id="alice",
        tenant_id="acme",
        args_hash=kw["args_hash"],
        stage=kw["stage"],
        decision=kw["decision"],
        rule=escape_controls(kw["rule"]),
        outcome=kw["outcome"],
        code=kw.get("code"),
        duration_s=kw.get("duration_s", 0.0),
        effects=tuple(escape_controls(str(e)) for e in kw.get("effects", ())),
        detail=None if detail is None else escape_controls(redact(detail)),
        final=kw.get("final", True),
    )
    assert made == expected
    assert repr(made) == repr(expected)
    assert all(text.isprintable() for text in (made.tool, made.rule, *made.effects))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.tool = "other"  # type: ignore[misc]


def test_an_audit_event_without_a_time_is_stamped_now() -> None:
    before = time.time()
    made = audit_event(
        Who(), "billing_invoice_get", stage="done", decision="allow", rule="grant", outcome="ok"
    )
    assert before <= made.ts <= time.time()


class Login(BaseModel):
    user: str
    passphrase: Annotated[str, Secret(), Field(max_length=200)]


class Plain(BaseModel):
    invoice_id: str
    count: int


HASHED: list[tuple[type[BaseModel], bytes, frozenset[str]]] = [
    (Plain, b'{"count": 2, "invoice_id": "inv_1"}', frozenset()),
    (Login, b'{"passphrase": "hunter22", "user": "alice"}', frozenset({"passphrase"})),
]


@pytest.mark.parametrize(("model", "raw", "secret"), HASHED, ids=["plain", "with a secret"])
def test_the_argument_hash_of_a_registry_is_the_documented_one(
    model: type[BaseModel], raw: bytes, secret: frozenset[str]
) -> None:
    instance = validate_arguments(model, raw)
    fast = hash_input(model.__pydantic_serializer__, instance, set(secret) or None)
    assert fast == validated_args_hash(instance, secret_fields=secret)
    if secret:  # the secret is left out: another passphrase hashes the same
        other = validate_arguments(model, raw.replace(b"hunter22", b"swordfish"))
        assert hash_input(model.__pydantic_serializer__, other, set(secret)) == fast


class Shaped(BaseModel):
    invoice_id: str
    amount_minor: int


@pytest.mark.parametrize(
    "result",
    [
        {"invoice_id": "inv_1", "amount_minor": 5, "note": "dropped"},
        Shaped(invoice_id="inv_2", amount_minor=7),
        {"invoice_id": "inv_3"},  # does not fit
        {"invoice_id": "x" * 500, "amount_minor": 1},  # too large
    ],
    ids=["dict", "model", "missing field", "too large"],
)
def test_shaping_with_a_tools_own_validator_answers_as_shape_result(result: object) -> None:
    def answer(shape: Callable[[], object]) -> object:
        try:
            return shape()
        except ToolError as exc:
            return (exc.code, exc.outcome)

    validator, serializer = Shaped.__pydantic_validator__, Shaped.__pydantic_serializer__
    fast = answer(lambda: shape_with(Shaped, validator, serializer, result, 200))
    assert fast == answer(lambda: shape_result(Shaped, result, max_bytes=200))


def _spec_of(registry: Registry, name: str) -> Any:
    spec = registry.get(name)
    assert spec is not None
    return spec


def test_a_read_no_rule_matched_is_allowed_with_the_default_decision() -> None:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("billing:invoice/{invoice_id}")], scope="billing.read")
    def billing_invoice_get(invoice_id: InvoiceId) -> Shaped:
        """Fetch one invoice. Use it to read an amount. It returns no notes."""
        return Shaped(invoice_id=invoice_id, amount_minor=1)

    spec = _spec_of(registry, "billing_invoice_get")
    effects = (read("billing:invoice/inv_1"),)
    decision = ApprovalPolicy().decide(spec.name, effects, reversible=True)
    verdict = authorize(spec, effects, context())
    assert (verdict.decision, verdict.rule, verdict.refusal, verdict.reason) == (
        decision.verdict,
        decision.rule_id,
        None,
        decision.reason,
    )
    assert verdict.decision == "allow"
    # Outside the grant it is still refused, whatever the approval rules say.
    narrow = Grant(scopes=frozenset({"billing.read"}), effects=(read("billing:invoice/inv_9"),))
    assert authorize(spec, effects, context(grant=narrow)).decision == "deny"


SLOW_FIRST_STEP_S = 0.15
TIMEOUT_S = 0.2


@pytest.mark.anyio
async def test_a_handlers_deadline_counts_from_before_its_first_step() -> None:
    """A handler that works without waiting first (here 0.15 s), then waits 0.1 s, ends
    after its 0.2 s timeout: the deadline is set from when the handler started, not from
    when it first waited (which would give it 0.35 s)."""
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(
        effects=[read("billing:invoice/{invoice_id}")], scope="billing.read", timeout=TIMEOUT_S
    )
    async def billing_invoice_slow(invoice_id: InvoiceId) -> Shaped:
        """Fetch one invoice slowly. Use it in tests of deadlines. It returns no notes."""
        time.sleep(SLOW_FIRST_STEP_S)  # work before the first wait, which no deadline stops
        await asyncio.sleep(0.1)
        return Shaped(invoice_id=invoice_id, amount_minor=1)

    with pytest.raises(ToolError) as info:
        await registry.call("billing_invoice_slow", {"invoice_id": "inv_1"}, context())
    assert info.value.code == "timeout"
    (event,) = registry.audit.events()
    assert (event.stage, event.outcome, event.code) == ("execute", "unknown", "timeout")


@pytest.mark.anyio
async def test_a_call_records_the_same_event_fields_as_before() -> None:
    """One admitted read, end to end: its event's fields as the audit chain stores them."""
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(
        effects=[read("billing:invoice/{invoice_id}")],
        scope="billing.read",
        callers={"direct", "code"},
    )
    async def billing_invoice_get(ctx: CallContext, invoice_id: InvoiceId) -> Shaped:
        """Fetch one invoice. Use it to read an amount. It returns no notes."""
        return Shaped(invoice_id=invoice_id, amount_minor=1)

    ctx = CallContext(
        principal=ALICE, grant=FULL_GRANT, run_id="run_9", call_id="c1", caller="code"
    )
    assert await registry.call("billing_invoice_get", {"invoice_id": "inv_1"}, ctx) == {
        "invoice_id": "inv_1",
        "amount_minor": 1,
    }
    (event,) = registry.audit.events()
    instance = validate_arguments(
        _spec_of(registry, "billing_invoice_get").input_model, b'{"invoice_id": "inv_1"}'
    )
    assert dataclasses.asdict(event) | {"ts": 0.0, "duration_s": 0.0} == {
        "ts": 0.0,
        "run_id": "run_9",
        "call_id": "c1",
        "caller": "code",
        "tool": "billing_invoice_get",
        "user_id": "alice",
        "tenant_id": "acme",
        "args_hash": validated_args_hash(instance, secret_fields=frozenset()),
        "stage": "done",
        "decision": "allow",
        "rule": "default",
        "outcome": "ok",
        "code": None,
        "duration_s": 0.0,
        "effects": ("read(billing:invoice/inv_1)",),
        "detail": None,
        "final": True,
        "approver": None,
    }
    assert type(event.effects[0]) is str
    assert isinstance(Effect.parse(event.effects[0]), Effect)
