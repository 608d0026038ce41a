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
