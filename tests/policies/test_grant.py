from __future__ import annotations

import pytest

from airlock.policies import Effect, Grant, network, read, spend, write

GRANT = Grant(
    scopes=frozenset({"billing.read"}),
    effects=(read("billing:invoice/*"), network("api.billing.example")),
    spend_limits={"USD": 1000},
)


@pytest.mark.parametrize(
    ("effect", "expected"),
    [
        (read("billing:invoice/inv_1"), True),
        (read("billing:invoice/{invoice_id}"), True),
        (read("billing:customer/c_1"), False),
        (write("billing:invoice/inv_1"), False),
        (network("api.billing.example"), True),
        (network("evil.example"), False),
        (spend(1000), True),
        (spend(1001), False),
        (spend(1, currency="EUR"), False),
        (spend("{amount}"), False),
    ],
)
def test_covers(effect: Effect, expected: bool) -> None:
    assert GRANT.covers(effect) is expected


def test_uncovered_names_the_first_effect_outside() -> None:
    outside = write("billing:invoice/inv_1")
    assert GRANT.uncovered([read("billing:invoice/inv_1"), outside]) == outside
    assert GRANT.uncovered([read("billing:invoice/inv_1")]) is None


# A call's spends, the limit (1000 USD) judging their total per currency: what is outside
@pytest.mark.parametrize(
    ("effects", "outside"),
    [
        ([spend(600), spend(600)], spend(1200)),
        ([spend(600), read("billing:invoice/inv_1"), spend(401)], spend(1001)),
        ([spend(1000), spend(0), spend(1)], spend(1001)),
    ],
)
def test_uncovered_adds_up_a_calls_spends_per_currency(
    effects: list[Effect], outside: Effect
) -> None:
    assert GRANT.uncovered(effects) == outside


def test_an_empty_grant_allows_nothing() -> None:
    assert not Grant().covers(read("billing:invoice/inv_1"))
    assert not Grant().allows_scope("billing.read")


def test_union_and_restrict() -> None:
    other = Grant(scopes=frozenset({"orders.read"}), spend_limits={"USD": 5000, "EUR": 1})
    both = GRANT.union(other)
    assert both.scopes == {"billing.read", "orders.read"}
    assert dict(both.spend_limits) == {"USD": 5000, "EUR": 1}
    assert both.restrict_scopes({"orders.read", "x.y"}).scopes == {"orders.read"}


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"effects": (spend(5),)}, "spend_limits"),
        ({"effects": (read("billing:invoice/{id}"),)}, "placeholders"),
        ({"spend_limits": {"USD": -1}}, "non-negative"),
        # one string is not a collection of names (frozenset() of it would be its letters)
        ({"propose": "billing_refund_*"}, "propose is one string"),
        ({"scopes": "billing.read"}, "scopes is one string 'billing.read'"),
        ({"effects": "read(billing:invoice/*)"}, "effects is one str"),
        ({"effects": read("billing:invoice/*")}, "effects is one Effect"),
    ],
)
def test_invalid_grants_are_refused(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        Grant(**kwargs)  # type: ignore[arg-type]


def test_grant_is_frozen() -> None:
    with pytest.raises(AttributeError):
        GRANT.scopes = frozenset()  # type: ignore[misc]
    with pytest.raises(TypeError):
        GRANT.spend_limits["USD"] = 10**9  # type: ignore[index]
