"""What admission precomputes per tool, or takes a shorter way to on every call, answers
exactly as the general way does: effects resolved by a tool's resolver, the argument hash of
arguments hashed as they were sent, a plain output shaped without a second serialization, a
read's authorization judged once per grant, the call trail and the runtime check made
without calling their classes."""

from __future__ import annotations

import dataclasses
import enum
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, field_validator

from airlock.policies import (
    ApprovalPolicy,
    ApprovalRule,
    Effect,
    EffectArgumentError,
    Grant,
    disclose,
    network,
    read,
    spend,
    write,
)
from airlock.tools import (
    AuditLog,
    CallContext,
    MemoryAuditStore,
    Registry,
    Secret,
    ToolError,
)
from airlock.tools import _execute as execute_module
from airlock.tools._admission import CallTrail, new_trail
from airlock.tools._arguments import (
    admit_arguments,
    effects_resolver,
    plain_fields,
    resolve_effects,
    sent_form_fields,
    validate_arguments,
    validated_args_hash,
)
from airlock.tools._egress import CallCheck
from airlock.tools._shaping import shape_plain, shape_with
from tests.tools.billing import ALICE, FULL_GRANT, context

# -- effects ----------------------------------------------------------------------------------

EFFECTS: list[Effect] = [
    read("billing:invoice/{invoice_id}"),
    read("billing:invoice/*"),
    read("billing:customer/{customer}/invoice/{invoice_id}"),
    read("billing:invoice/{invoice_id}/lines"),
    write("billing:refund/{invoice_id}"),
    network("api.example.com"),
    network("{url}"),
    disclose("email:{recipients[]}"),
    spend("{amount_minor}", currency="USD"),
    spend(500, currency="EUR"),
]
VALUES: list[dict[str, Any]] = [
    {
        "invoice_id": "inv_1",
        "customer": "c_1",
        "url": "https://api.example.com/x",
        "recipients": ["a@acme.com", "b@acme.com"],
        "amount_minor": 5,
    },
    {
        "invoice_id": "a@b@c",
        "customer": "c",
        "url": "api.example.com",
        "recipients": [],
        "amount_minor": 0,
    },
    {
        "invoice_id": "../admin",
        "customer": "c/d",
        "url": "https://u@evil.example/",
        "recipients": "x",
        "amount_minor": -1,
    },
    {"invoice_id": 7, "customer": True, "url": 5, "recipients": [1, 2], "amount_minor": "5"},
    {"invoice_id": "", "customer": "*", "url": "", "recipients": ["*"], "amount_minor": None},
    {"invoice_id": "x" * 201, "customer": "ok", "url": "a b", "recipients": [""]},
    {"invoice_id": "x" * 200, "customer": "_", "url": "é", "recipients": ["a\n"]},
    {"invoice_id": "class", "customer": "é", "url": "1a", "recipients": ["inv_1\n", "_a"]},
    {"invoice_id": "inv_1\n", "customer": "a b", "url": "x" * 200},
    {},
]


def _outcome(resolve: Any, values: dict[str, Any]) -> object:
    try:
        return resolve(values)
    except EffectArgumentError as exc:
        return ("error", exc.field, exc.reason)
    except ToolError as exc:
        return ("error", exc.code, str(exc))


@pytest.mark.parametrize("effect", EFFECTS, ids=str)
@pytest.mark.parametrize("values", VALUES, ids=range(len(VALUES)))
def test_an_effects_resolver_resolves_as_resolve_all(
    effect: Effect, values: dict[str, Any]
) -> None:
    fast = _outcome(effect.resolver(), values)
    assert fast == _outcome(effect.resolve_all, values)
    if not isinstance(fast, tuple) or fast[:1] != ("error",):
        assert [dataclasses.astuple(e) for e in fast] == [  # placeholders, each, takes_url too
            dataclasses.astuple(e) for e in effect.resolve_all(values)
        ]


@pytest.mark.parametrize(
    "effects",
    [(EFFECTS[0],), (EFFECTS[0], EFFECTS[2], EFFECTS[5]), (EFFECTS[7], EFFECTS[0]), ()],
    ids=["one", "several", "a list first", "none"],
)
@pytest.mark.parametrize("values", VALUES, ids=range(len(VALUES)))
def test_a_tools_resolver_resolves_as_resolve_effects(
    effects: tuple[Effect, ...], values: dict[str, Any]
) -> None:
    def general(values: dict[str, Any]) -> object:
        return resolve_effects(effects, values)

    fast = _outcome(effects_resolver(effects), values)
    slow = _outcome(general, values)
    if isinstance(fast, tuple) and fast[:1] == ("error",):  # resolve_effects says it as input
        assert isinstance(slow, tuple)
        assert slow[:2] == ("error", "invalid_input")
    else:
        assert fast == slow


# -- the argument hash ------------------------------------------------------------------------

InvoiceId = Annotated[str, Field(pattern=r"^inv_[a-z0-9]{1,32}$", max_length=36)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class PlainOne(Strict):
    invoice_id: InvoiceId


class PlainMany(Strict):
    invoice_id: str
    count: Annotated[int, Field(ge=0)]
    final: bool


class WithSecret(Strict):
    user: str
    passphrase: Annotated[str, Secret(), Field(max_length=200)]


class Stripped(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, str_strip_whitespace=True)
    invoice_id: str


class Aliased(Strict):
    invoice_id: str = Field(alias="id")


class Defaulted(Strict):
    invoice_id: str
    count: int = 1


class Lowered(Strict):
    invoice_id: str

    @field_validator("invoice_id")
    @classmethod
    def lower(cls, value: str) -> str:
        return value.lower()


class Floating(Strict):
    amount: float


class Colour(enum.Enum):
    RED = "red"


class Enumerated(Strict):
    colour: Colour


PLAIN_INPUTS: list[type[BaseModel]] = [PlainOne, PlainMany]
NOT_SENT_FORM: list[type[BaseModel]] = [
    WithSecret,
    Stripped,
    Aliased,
    Defaulted,
    Lowered,
    Floating,
    Enumerated,
]


@pytest.mark.parametrize("model", PLAIN_INPUTS, ids=lambda m: m.__name__)
def test_a_plain_input_model_is_hashed_as_sent(model: type[BaseModel]) -> None:
    assert sent_form_fields(model) == tuple(model.model_fields)


@pytest.mark.parametrize("model", NOT_SENT_FORM, ids=lambda m: m.__name__)
def test_an_input_model_that_may_change_or_hide_a_value_is_hashed_from_its_instance(
    model: type[BaseModel],
) -> None:
    assert sent_form_fields(model) is None


HASH_CASES: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (PlainOne, {"invoice_id": "inv_1"}),
    (PlainMany, {"invoice_id": "inv_1", "count": 2, "final": True}),
    (PlainMany, {"count": 2, "invoice_id": "inv_1", "final": False}),  # another order
    (PlainMany, {"invoice_id": 'é\n"\\\u2028\x00', "count": 10**30, "final": True}),
    (PlainMany, {"invoice_id": "NaN Infinity", "count": 0, "final": True}),
    (WithSecret, {"user": "alice", "passphrase": "hunter22"}),
    (Stripped, {"invoice_id": "  inv_1  "}),
    (Aliased, {"id": "inv_1"}),
    (Defaulted, {"invoice_id": "inv_1"}),
    (Lowered, {"invoice_id": "INV_1"}),
    (Floating, {"amount": 1e2}),
    (Enumerated, {"colour": "red"}),
]


@pytest.mark.parametrize(("model", "args"), HASH_CASES, ids=range(len(HASH_CASES)))
def test_the_argument_hash_of_admission_is_the_documented_one(
    model: type[BaseModel], args: dict[str, Any]
) -> None:
    secret = frozenset(
        name
        for name, info in model.model_fields.items()
        if any(isinstance(m, Secret) for m in info.metadata)
    )
    instance, digest = admit_arguments(
        model.__pydantic_validator__,
        model.__pydantic_serializer__,
        set(secret) or None,
        sent_form_fields(model),
        args,
        1 << 20,
    )
    assert instance == validate_arguments(model, instance.model_dump_json(by_alias=True).encode())
    assert digest == validated_args_hash(instance, secret_fields=secret)


@pytest.mark.parametrize(
    "args",
    [
        {"invoice_id": "bad"},
        {"invoice_id": "inv_1", "x": 1},
        {"invoice_id": float("nan")},
        {"invoice_id": "inv_1", "x": [float("inf")]},
        {"invoice_id": "inv_1", float("nan"): 1},
        {"invoice_id": "NaN", "x": "Infinity"},
        {"invoice_id": object()},
        {"invoice_id": "inv_" + "a" * 40},
        ["invoice_id"],
    ],
    ids=[
        "pattern",
        "extra",
        "nan",
        "infinity in a list",
        "a nan key",
        "nan as text",
        "not json",
        "too long",
        "not an object",
    ],
)
def test_arguments_admission_refuses_answer_as_before(args: Any) -> None:
    from airlock.tools._arguments import encode_arguments, validate_input

    def answer(run: Any) -> object:
        try:
            run()
        except ToolError as exc:
            return (exc.code, getattr(exc, "issues", None))
        return "admitted"

    validator, serializer = PlainOne.__pydantic_validator__, PlainOne.__pydantic_serializer__
    fast = answer(lambda: admit_arguments(validator, serializer, None, ("invoice_id",), args, 40))
    slow = answer(lambda: validate_input(validator, encode_arguments(args, max_bytes=40)))
    assert fast == slow != "admitted"


# -- shaping ----------------------------------------------------------------------------------


class Shaped(BaseModel):
    invoice_id: str
    amount_minor: int
    paid: bool


class MoreShaped(Shaped):
    note: str


class Amount(enum.IntEnum):
    FIVE = 5


def test_a_plain_output_model_is_plain_and_others_are_not() -> None:
    assert plain_fields(Shaped) == ("invoice_id", "amount_minor", "paid")
    assert plain_fields(Floating) is None
    assert plain_fields(Defaulted) is None


@pytest.mark.parametrize(
    "result",
    [
        {"invoice_id": "inv_1", "amount_minor": 5, "paid": True, "note": "dropped"},
        {"invoice_id": "inv_1", "amount_minor": "5", "paid": "true"},  # coerced (lax)
        {"invoice_id": "inv_1", "amount_minor": 5.0, "paid": 1},
        {"invoice_id": "inv_1", "amount_minor": Amount.FIVE, "paid": False},
        Shaped(invoice_id="inv_2", amount_minor=7, paid=False),
        MoreShaped(invoice_id="inv_2", amount_minor=7, paid=False, note="kept out"),
        {"invoice_id": "inv_3"},  # does not fit
        {"invoice_id": "x" * 500, "amount_minor": 1, "paid": True},  # too large
    ],
    ids=["dict", "coerced", "float", "int enum", "model", "subclass", "missing", "too large"],
)
def test_shaping_a_plain_output_answers_as_shape_with(result: object) -> None:
    def answer(shape: Any) -> object:
        try:
            data = shape(Shaped, validator, serializer, result, 200)
        except ToolError as exc:
            return (exc.code, exc.outcome)
        return (data, [type(v) for v in data.values()])

    validator, serializer = Shaped.__pydantic_validator__, Shaped.__pydantic_serializer__
    assert answer(shape_plain) == answer(shape_with)


# -- authorization ----------------------------------------------------------------------------


class Found(BaseModel):
    invoice_id: str


def _registry() -> Registry:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("billing:invoice/{invoice_id}")], scope="billing.read")
    def billing_invoice_get(invoice_id: InvoiceId) -> Found:
        """Fetch one invoice. Use it to read an id. It returns nothing else."""
        return Found(invoice_id=invoice_id)

    return registry


def _call(registry: Registry, ctx: CallContext) -> tuple[str, str, str]:
    try:
        registry.admit("billing_invoice_get", {"invoice_id": "inv_1"}, ctx)
    except ToolError as exc:
        event = registry.audit.events()[-1]
        return (exc.code, event.decision, event.rule)
    return ("admitted", "allow", "")


@pytest.mark.anyio
async def test_a_reads_authorization_judged_once_per_grant_follows_the_grant_and_rules() -> None:
    registry = _registry()
    deny = ApprovalPolicy(
        rules=(ApprovalRule(id="no-reads", action="deny", tools=("billing_invoice_*",)),)
    )
    narrow = Grant(scopes=frozenset({"billing.read"}), effects=(read("billing:invoice/inv_9"),))
    # Judged and remembered under the full grant; then every other situation still decides.
    assert _call(registry, context())[0] == "admitted"
    assert _call(registry, context())[0] == "admitted"
    assert _call(registry, context(grant=narrow))[:2] == ("denied", "deny")
    ctx = dataclasses.replace(context(), approvals=deny)
    assert _call(registry, ctx) == ("denied", "deny", "no-reads")
    assert _call(registry, context())[0] == "admitted"
    tool = registry._tools["billing_invoice_get"]
    assert tool.judged_once
    assert tool.judged[0] is not None
    assert tool.judged[0][0] is FULL_GRANT


def test_a_tool_whose_effects_kinds_depend_on_its_arguments_is_judged_every_time() -> None:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[disclose("email:{to[]}")], scope="billing.read")
    def billing_invoice_send(
        to: Annotated[list[Annotated[str, Field(max_length=100)]], Field(max_length=10)],
    ) -> Found:
        """Send one invoice. Use it to mail it. It returns the id only."""
        return Found(invoice_id="inv_1")

    assert registry._tools["billing_invoice_send"].judged_once is False


# -- objects made without calling their class ------------------------------------------------


def test_a_trail_made_cheaply_is_the_trail_its_class_makes() -> None:
    audit, ctx = AuditLog(MemoryAuditStore()), context()
    for name in ("billing_invoice_get", "x" * 300, 42):
        made, plain = new_trail(audit, name, {}, ctx), CallTrail(audit, name, {}, ctx)
        assert type(made) is CallTrail
        for slot in CallTrail.__slots__:
            if slot != "started":
                assert getattr(made, slot) == getattr(plain, slot), slot


@pytest.mark.anyio
async def test_a_calls_runtime_check_made_cheaply_is_the_check_its_reach_makes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = _registry()
    made: list[Any] = []
    new = execute_module._new_object

    def recording(cls: type) -> Any:
        made.append(new(cls))
        return made[-1]

    monkeypatch.setattr(execute_module, "_new_object", recording)
    ctx = context(principal=ALICE)
    await registry.call("billing_invoice_get", {"invoice_id": "inv_1"}, ctx)
    (check,) = made
    reach = registry._tools["billing_invoice_get"].reach
    expected = reach.check(phase="handler", tenant=ALICE.tenant_id, values={"invoice_id": "inv_1"})
    expected.closed = True  # (as the call's check is once it has run)
    assert type(check) is CallCheck
    for slot in CallCheck.__slots__:
        assert getattr(check, slot) == getattr(expected, slot), slot
