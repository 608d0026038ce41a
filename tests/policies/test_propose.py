"""The policy side of proposals from code: which write tools a grant lets programs propose."""

from __future__ import annotations

import pytest

from airlock.policies import Grant, PolicyFileError, Principal, parse_policy

ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"billing.write"}))
POLICY = """
version = 1
[roles.agent]
scopes = ["billing.write"]
propose = ["billing_refund_*"]
[principals.alice]
roles = ["agent"]
propose = ["billing_credit_create"]
"""


def test_a_grant_proposes_only_what_its_patterns_name() -> None:
    grant = parse_policy(POLICY).grant_for(ALICE)
    assert grant.propose == frozenset({"billing_refund_*", "billing_credit_create"})
    assert grant.allows_proposal("billing_refund_create")
    assert grant.allows_proposal("billing_credit_create")
    assert not grant.allows_proposal("billing_invoice_void")
    assert not Grant().allows_proposal("billing_refund_create")  # nothing by default


def test_restricting_scopes_keeps_the_propose_list() -> None:
    grant = Grant(scopes=frozenset({"a.b"}), propose=frozenset({"x_y_z"}))
    assert grant.restrict_scopes({"a.b"}).propose == frozenset({"x_y_z"})


@pytest.mark.parametrize(
    "pattern", ["Billing_Refund", "billing refund", "", "a" * 65, "billing:refund"]
)
def test_a_malformed_propose_pattern_is_refused_with_its_place(pattern: str) -> None:
    text = POLICY.replace('propose = ["billing_credit_create"]', f"propose = [{pattern!r}]")
    with pytest.raises(PolicyFileError) as refused:
        parse_policy(text.replace("'", '"'), source="p.toml")
    assert refused.value.key == "principals.alice.propose[0]"
