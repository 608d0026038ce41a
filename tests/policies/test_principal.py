from __future__ import annotations

import pytest
from pydantic import ValidationError

from airlock.policies import Principal


def test_principal_is_frozen_and_hashable() -> None:
    alice = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"billing.read"}))
    assert alice.has_scope("billing.read")
    assert not alice.has_scope("billing.write")
    assert hash(alice) == hash(alice.model_copy())
    with pytest.raises(ValidationError):
        alice.user_id = "mallory"  # type: ignore[misc]


@pytest.mark.parametrize(
    "data",
    [
        {"user_id": "", "tenant_id": "acme"},
        {"user_id": "../admin", "tenant_id": "acme"},
        {"user_id": 7, "tenant_id": "acme"},
        {"user_id": "a", "tenant_id": "acme", "scopes": ["Billing"]},
        {"user_id": "a", "tenant_id": "acme", "role": "admin"},
    ],
)
def test_invalid_principals_are_refused(data: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Principal.model_validate(data)
