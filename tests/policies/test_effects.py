from __future__ import annotations

import dataclasses
import re
from enum import Enum, StrEnum

import pytest

from airlock.policies import Effect, EffectArgumentError, disclose, network, read, spend, write
from airlock.policies._patterns import covers


def test_constructors_build_each_kind() -> None:
    assert [e.kind for e in (read("a:b/1"), write("a:b/1"), network("h.example"))] == [
        "read",
        "write",
        "network",
    ]
    assert spend(500).amount == 500
    assert spend(500).target == "USD"
    assert disclose("email:{to}").placeholders == {"to"}
    assert write("a:b/1").is_side_effect
    assert not read("a:b/1").is_side_effect


def test_resolve_fills_placeholders_from_validated_arguments() -> None:
    effect = read("billing:invoice/{invoice_id}")
    assert effect.pattern == "billing:invoice/*"
    assert effect.resolve({"invoice_id": "inv_1"}) == read("billing:invoice/inv_1")
    assert effect.resolve({"invoice_id": 42}) == read("billing:invoice/42")
    assert spend("{amount}", currency="EUR").resolve({"amount": 7}) == spend(7, currency="EUR")


def test_resolve_without_placeholders_returns_the_same_effect() -> None:
    effect = read("billing:invoice/*")
    assert effect.resolve({}) is effect


@pytest.mark.parametrize(
    "value",
    [
        *("../admin", "a/b", "*", "**", "", ".hidden", "x" * 201, None, 1.5, True, ["a"], "a b"),
        *("inv_1\n", "a\n", "a@b\n", "x" * 200 + "\n"),  # "$" matched before a final "\n"
    ],
)
def test_resolve_refuses_values_that_are_not_one_safe_segment(value: object) -> None:
    with pytest.raises(EffectArgumentError) as info:
        read("billing:invoice/{invoice_id}").resolve({"invoice_id": value})
    assert info.value.field == "invoice_id"


@pytest.mark.parametrize("amount", [-1, "5", None, 2.5, True])
def test_resolve_refuses_spend_amounts_that_are_not_minor_units(amount: object) -> None:
    with pytest.raises(EffectArgumentError):
        spend("{amount}").resolve({"amount": amount})


class Code(StrEnum):
    EUR = "EUR"


class PlainCode(Enum):  # (a member that is no str: its value is)
    GBP = "GBP"


# A spend in the currency a field names: (declared amount, the call's fields, what it spends,
# or the field refused). Built in the test: before currency="{field}" existed, it raised.
SPENDS_IN_A_NAMED_CURRENCY: list[tuple[int | str, dict[str, object], Effect | str]] = [
    ("{amount}", {"amount": 7, "currency": "EUR"}, spend(7, currency="EUR")),
    ("{amount}", {"amount": 0, "currency": "JPY"}, spend(0, currency="JPY")),
    (500, {"currency": "GBP"}, spend(500, currency="GBP")),
    ("{amount}", {"amount": 7, "currency": "eur"}, "currency"),
    ("{amount}", {"amount": 7, "currency": "EURO"}, "currency"),
    ("{amount}", {"amount": 7, "currency": "E@R"}, "currency"),
    ("{amount}", {"amount": 7, "currency": "EUR\n"}, "currency"),
    ("{amount}", {"amount": 7, "currency": 978}, "currency"),
    ("{amount}", {"amount": 7, "currency": None}, "currency"),
    ("{amount}", {"amount": 7}, "currency"),
    ("{amount}", {"amount": -7, "currency": "EUR"}, "amount"),
    # a field typed as an enum of strings arrives as its member: its value is the code
    ("{amount}", {"amount": 7, "currency": Code.EUR}, spend(7, currency="EUR")),
    ("{amount}", {"amount": 7, "currency": PlainCode.GBP}, spend(7, currency="GBP")),
]


@pytest.mark.parametrize(("amount", "args", "expected"), SPENDS_IN_A_NAMED_CURRENCY)
def test_a_spend_is_in_the_currency_its_field_names(
    amount: int | str, args: dict[str, object], expected: Effect | str
) -> None:
    declared = spend(amount, currency="{currency}")
    assert "currency" in declared.placeholders
    assert Effect.parse(str(declared)) == declared
    for resolve in (declared.resolve_all, declared.resolver()):
        if isinstance(expected, Effect):
            assert resolve(args) == (expected,)
            continue
        with pytest.raises(EffectArgumentError) as info:
            resolve(args)
        assert info.value.field == expected


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda: read("invoice/1"), "service:object"),
        (lambda: read(""), "1-256"),
        (lambda: read("a:b/{Bad}"), "1-256"),
        (lambda: read("a:b/{x"), "1-256"),
        (lambda: read("a:b/***"), "'***'"),
        (lambda: network("evil host"), "1-256"),
        (lambda: read("billing:invoice/inv_1\n"), "1-256"),
        (lambda: spend(5, currency="USD\n"), "three upper-case"),
        (lambda: spend(-5), "negative"),
        (lambda: spend(5, currency="usd"), "three upper-case"),
        (lambda: spend(5, currency="{currencies[]}"), "or '{field}'"),
        (lambda: spend(5, currency="{Currency}"), "or '{field}'"),
        (lambda: spend("amount"), "'{field}'"),
        (lambda: Effect("read", "a:b", 5), "only spend"),
        (lambda: Effect("delete", "a:b"), "unknown effect kind"),  # type: ignore[arg-type]
    ],
)
def test_invalid_effects_are_refused_with_a_fix(build: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        build()  # type: ignore[operator]


@pytest.mark.parametrize(
    "effect",
    [
        read("billing:invoice/*"),
        write("billing:refund/{id}"),
        network("*.stripe.com"),
        disclose("email:{to}"),
        spend(500, currency="EUR"),
        spend("{amount}"),
    ],
)
def test_parse_reads_what_str_writes(effect: Effect) -> None:
    assert Effect.parse(str(effect)) == effect


@pytest.mark.parametrize("text", ["read billing:x", "readx(a:b)", "spend(USD)", "spend(5 usd)"])
def test_parse_refuses_malformed_text(text: str) -> None:
    with pytest.raises(ValueError, match=r"spend|not an effect"):
        Effect.parse(text)


# (case, declared effect, a call's fields): what resolve() makes of them, as a preview keeps
# it, reads back as the same effect, even where no declaration could be written so.
RESOLVED = [
    ("a resource over 256 characters", write("crm:org/{org}/contact/{contact}"),
     {"org": "o" * 150, "contact": "c" * 150}),
    ("a URL with a long path", network("{url}"),
     {"url": "https://hooks.example.com/" + "segment/" * 40 + "end"}),
    ("a URL with escapes, '~', ':' and '@' in its path", network("{url}"),
     {"url": "https://Hooks.Example.com:443/~ops/a:b@c/%7e%20x+y"}),
    ("a host read as a URL's host", network("https://{host}/v1"), {"host": "API.Example.com."}),
    ("an e-mail domain read as a mail server reads it", disclose("email:{to}"),
     {"to": "Bob+Tag@ACME.com."}),
    ("a segment of unusual but valid characters", write("crm:contact/{id}"),
     {"id": "a..b+c@d_-e"}),
    ("a list placeholder", disclose("email:{to[]}"), {"to": ["a@acme.com", "b@acme.com"]}),
    ("a spend in a currency a field names", spend("{amount}", currency="{currency}"),
     {"amount": 10**30, "currency": "EUR"}),
    ("no placeholder at all", read("billing:invoice/*"), {}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("declared", "args"), [r[1:] for r in RESOLVED], ids=[r[0] for r in RESOLVED]
)
def test_parse_resolved_reads_what_a_call_resolved(
    declared: Effect, args: dict[str, object]
) -> None:
    for effect in declared.resolve_all(args):
        again = Effect.parse(str(effect), resolved=True)
        assert again == effect
        assert (again.placeholders, again.each, again.takes_url) == (frozenset(), None, False)


def test_a_resolved_target_may_be_longer_than_a_declared_one() -> None:
    [effect] = write("crm:org/{org}/contact/{contact}").resolve_all(
        {"org": "o" * 150, "contact": "c" * 150}
    )
    assert len(effect.target) > 256
    with pytest.raises(ValueError, match="1-256 characters"):
        Effect.parse(str(effect))  # a declaration: refused
    assert Effect.parse(str(effect), resolved=True) == effect


@pytest.mark.parametrize(
    "text",
    [
        "write(billing:refund/{invoice_id})",  # a placeholder: not resolved
        "spend({amount} USD)",
        "spend(500 {currency})",
        "network({url})",
        "read(billing:invoice/a b)",  # white space no call resolves to
        "read(billing:invoice/\tx)",
        "read(billing:invoice/\x7f)",
        "read(billing:invoice/caf\u00e9)",  # non-ASCII
        "read billing:x",  # not an effect at all
        "spend(USD)",
    ],
)
def test_parse_resolved_refuses_what_no_call_resolves_to(text: str) -> None:
    with pytest.raises(ValueError, match=r"resolved effect|not an effect|spend"):
        Effect.parse(text, resolved=True)


@pytest.mark.parametrize(
    ("grant", "declared", "expected"),
    [
        ("billing:invoice/*", "billing:invoice/inv_1", True),
        ("billing:invoice/*", "billing:invoice/a/b", False),
        ("billing:invoice/*", "billing:invoices/inv_1", False),
        ("billing:**", "billing:invoice/a/b", True),
        ("billing:invoice/*", "billing:invoice/*", True),
        ("billing:invoice/inv_1", "billing:invoice/*", False),
        ("billing:invoice/*", "billing:**", False),
        ("billing:*/*/*", "billing:**", False),
        ("billing:**", "billing:**", True),
        ("billing:**", "billing:invoice/*", True),
        ("*.stripe.com", "api.stripe.com", True),
        ("*.stripe.com", "stripe.com", False),
        ("api.stripe.com", "api.stripe.com.evil", False),
        ("billing:inv*", "billing:invoice", True),
        ("billing:inv*", "billing:*", False),
    ],
)
def test_pattern_containment(grant: str, declared: str, expected: bool) -> None:
    assert covers(grant, declared) is expected


# -- a resolved effect is made without the dataclass's __init__: the same effect ----------------

RESOLVED = [  # (declared, arguments, the effect it resolves to)
    (read("billing:invoice/{invoice_id}"), {"invoice_id": "inv_1"}, read("billing:invoice/inv_1")),
    (read("billing:invoice/{invoice_id}"), {"invoice_id": 42}, read("billing:invoice/42")),
    (read("a:{x}/b/{y}"), {"x": "one", "y": "two@host"}, read("a:one/b/two@host")),
    (disclose("email:{to}"), {"to": "bob@example.com"}, disclose("email:bob@example.com")),
    (network("{url}"), {"url": "docs.example.com"}, network("docs.example.com")),
    (
        network("{url}"),
        {"url": "https://docs.example.com/a"},
        network("https://docs.example.com/a"),
    ),
    (spend("{amount}", currency="EUR"), {"amount": 7}, spend(7, currency="EUR")),
]


@pytest.mark.parametrize(("declared", "args", "expected"), RESOLVED, ids=str)
def test_a_resolved_effect_is_a_frozen_effect_equal_to_one_built_plainly(
    declared: Effect, args: dict[str, object], expected: Effect
) -> None:
    resolved = declared.resolve(args)
    assert type(resolved) is Effect
    assert resolved == expected
    assert hash(resolved) == hash(expected)
    assert (str(resolved), repr(resolved)) == (str(expected), repr(expected))
    assert (resolved.placeholders, resolved.each, resolved.takes_url) == (frozenset(), None, False)
    assert resolved.resolve({}) is resolved  # nothing left to fill
    with pytest.raises(dataclasses.FrozenInstanceError):
        resolved.target = "a:b/c"  # type: ignore[misc]


def test_a_resolved_effect_sets_every_field_of_an_effect() -> None:
    # Made slot by slot, in the order of the dataclass's fields: none may be left unset.
    assert Effect.__slots__ == tuple(f.name for f in dataclasses.fields(Effect))
    resolved = read("a:b/{x}").resolve({"x": "y"})
    assert all(hasattr(resolved, name) for name in Effect.__slots__)


@pytest.mark.parametrize(
    "value", ["a@b@c", "../x", "a/b", "*", ".x", "a b", "x" * 201, "", 1.5, None, "inv_1\n"]
)
def test_a_value_off_the_quick_path_is_refused_as_before(value: object) -> None:
    with pytest.raises(EffectArgumentError):
        read("a:b/{x}").resolve({"x": value})
