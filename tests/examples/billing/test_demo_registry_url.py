"""``examples.billing:demo_registry`` reaches the billing service at ``BILLING_URL`` (the
service of ``python -m examples.billing --port N``, when port 8400 is taken), by default at
``DEMO_BASE_URL``; the URL is each tool's network destination, so the inventory names it."""

from __future__ import annotations

import pytest

from airlock.inventory import destinations, load_registry
from airlock.policies import AirlockError
from examples.billing import DEMO_BASE_URL

REGISTRY_REF = "examples.billing:demo_registry"

# (case, BILLING_URL or None for unset, the destination every tool has)
URLS: list[tuple[str, str | None, str]] = [
    ("unset", None, DEMO_BASE_URL),
    ("empty", "", DEMO_BASE_URL),
    ("another port", "http://127.0.0.1:8471", "http://127.0.0.1:8471"),
    ("a trailing slash", "http://127.0.0.1:8471/", "http://127.0.0.1:8471"),
]


@pytest.mark.parametrize(("url", "destination"), [u[1:] for u in URLS], ids=[u[0] for u in URLS])
def test_the_registry_reaches_the_service_at_billing_url(
    monkeypatch: pytest.MonkeyPatch, url: str | None, destination: str
) -> None:
    if url is None:
        monkeypatch.delenv("BILLING_URL", raising=False)
    else:
        monkeypatch.setenv("BILLING_URL", url)
    catalog = load_registry(REGISTRY_REF)
    specs = list(catalog.specs())
    assert specs
    assert {destinations(spec) for spec in specs} == {(destination,)}


def test_a_billing_url_that_is_not_one_is_named_in_the_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BILLING_URL", "localhost:8471")
    with pytest.raises(AirlockError, match="BILLING_URL='localhost:8471' must be http"):
        load_registry(REGISTRY_REF)
