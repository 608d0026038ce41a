from __future__ import annotations

from pathlib import Path

import pytest

from airlock.policies import (
    Policy,
    PolicyFileError,
    Principal,
    UsageError,
    load_policy,
    parse_policy,
    read,
    spend,
    write,
)

EXAMPLE = """\
version = 1

[roles.billing_reader]
scopes = ["billing.read"]
effects = [
  "read(billing:invoice/*)",
  "network(api.billing.example)",
]

[roles.billing_agent]
scopes = ["billing.read", "billing.write"]
effects = ["write(billing:refund/*)"]
spend_limits = { USD = 50000 }

[[roles.billing_agent.rules]]
id = "large-refund"
action = "ask"
effect = "spend"
min_amount = 10000

[principals."*"]
roles = ["billing_reader"]

[principals.alice]
tenant = "acme"
roles = ["billing_agent"]

[[principals.alice.rules]]
id = "no-voids"
action = "deny"
tools = ["billing_invoice_void"]
"""

ALICE = Principal(
    user_id="alice", tenant_id="acme", scopes=frozenset({"billing.read", "billing.write"})
)


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    path = tmp_path / "policy.toml"
    path.write_text(EXAMPLE)
    return load_policy(path)


def test_the_documented_example_is_in_the_module_docstring() -> None:
    import airlock.policies._policy_file as module

    assert module.__doc__ is not None
    assert "[[roles.billing_agent.rules]]" in module.__doc__


def test_grant_is_the_union_of_applicable_entries(policy: Policy) -> None:
    grant = policy.grant_for(ALICE)
    assert grant.scopes == {"billing.read", "billing.write"}
    assert grant.covers(read("billing:invoice/inv_1"))
    assert grant.covers(write("billing:refund/r_1"))
    assert grant.covers(spend(50_000))
    assert not grant.covers(spend(50_001))
    assert policy.roles == {"billing_reader", "billing_agent"}


def test_rules_follow_the_principal(policy: Policy) -> None:
    assert [r.id for r in policy.approvals_for(ALICE).rules] == ["large-refund", "no-voids"]


def test_scopes_never_exceed_the_sessions(policy: Policy) -> None:
    narrow = ALICE.model_copy(update={"scopes": frozenset({"billing.read"})})
    assert policy.grant_for(narrow).scopes == {"billing.read"}


def test_an_entry_bound_to_another_tenant_does_not_apply(policy: Policy) -> None:
    elsewhere = ALICE.model_copy(update={"tenant_id": "globex"})
    grant = policy.grant_for(elsewhere)
    assert not grant.covers(write("billing:refund/r_1"))
    assert grant.covers(read("billing:invoice/inv_1"))  # from "*"
    assert policy.approvals_for(elsewhere).rules == ()


def test_an_unnamed_principal_gets_only_the_wildcard_entry() -> None:
    policy = parse_policy('version = 1\n[principals.bob]\nscopes = ["x.read"]\n')
    stranger = Principal(user_id="eve", tenant_id="acme", scopes=frozenset({"x.read"}))
    assert policy.grant_for(stranger).scopes == frozenset()


def test_the_names_the_file_declares(policy: Policy) -> None:
    assert policy.principals == ("*", "alice")
    assert dict(policy.tenants) == {"*": None, "alice": "acme"}
    assert policy.scopes == {"billing.read", "billing.write"}
    extra = parse_policy('version = 1\n[principals.bob]\nscopes = ["x.read"]\n[roles.r]\n')
    assert (extra.principals, extra.roles, extra.scopes) == (("bob",), {"r"}, {"x.read"})


def test_a_role_has_its_own_authority_without_the_wildcard(policy: Policy) -> None:
    agent = policy.role_grant("billing_agent")
    assert agent.scopes == {"billing.read", "billing.write"}
    assert agent.covers(write("billing:refund/r_1"))
    assert not agent.covers(read("billing:invoice/inv_1"))  # that is billing_reader's
    assert dict(agent.spend_limits) == {"USD": 50_000}
    assert [r.id for r in policy.role_approvals("billing_agent").rules] == ["large-refund"]
    assert policy.role_approvals("billing_reader").rules == ()
    with pytest.raises(KeyError, match="no role 'auditor'; the policy declares: billing_agent"):
        policy.role_grant("auditor")
    with pytest.raises(KeyError, match="auditor"):
        policy.role_approvals("auditor")


def _replace(old: str, new: str) -> str:
    assert old in EXAMPLE
    return EXAMPLE.replace(old, new, 1)


@pytest.mark.parametrize(
    ("text", "key", "line", "fragment"),
    [
        (
            _replace('action = "ask"', 'action = "maybe"'),
            "roles.billing_agent.rules[0].action",
            17,
            "'allow', 'ask' or 'deny'",
        ),
        (
            _replace('roles = ["billing_agent"]', 'roles = ["nope"]'),
            "principals.alice.roles[0]",
            26,
            "unknown role 'nope'",
        ),
        (
            _replace('"network(api.billing.example)"', '"netwrk(x)"'),
            "roles.billing_reader.effects[1]",
            5,
            "not an effect",
        ),
        (
            _replace("spend_limits", "spend_limit"),
            "roles.billing_agent.spend_limit",
            13,
            "unknown key",
        ),
        (
            _replace("USD = 50000", "USD = -1"),
            "roles.billing_agent.spend_limits.USD",
            13,
            "greater than or equal to 0",
        ),
        (
            _replace("USD = 50000", "USD = true"),
            "roles.billing_agent.spend_limits.USD",
            13,
            "integer",
        ),
        (_replace("version = 1", "version = 2"), "version", 1, "1"),
        (_replace("version = 1\n", ""), "version", None, "required key is missing"),
        (
            _replace('scopes = ["billing.read"]', 'scopes = ["Billing"]'),
            "roles.billing_reader.scopes[0]",
            4,
            "pattern",
        ),
        (
            _replace('"read(billing:invoice/*)"', '"spend(5 USD)"'),
            "roles.billing_reader.effects[0]",
            5,
            "spend_limits",
        ),
        (
            _replace('id = "no-voids"', 'id = "large-refund"'),
            "principals.alice.rules[0].id",
            29,
            "already used at roles.billing_agent.rules[0].id",
        ),
        # a rule's values are read strictly, as the grant's are
        (
            _replace("min_amount = 10000", 'min_amount = "10000"'),
            "roles.billing_agent.rules[0].min_amount",
            19,
            "valid integer",
        ),
        (
            _replace("min_amount = 10000", "min_amount = true"),
            "roles.billing_agent.rules[0].min_amount",
            19,
            "valid integer",
        ),
        (
            _replace("min_amount = 10000", 'min_amount = 10000\nreversible = "no"'),
            "roles.billing_agent.rules[0].reversible",
            20,
            "valid boolean",
        ),
        (
            _replace("min_amount = 10000", 'targets = ["ÜSD"]'),
            "roles.billing_agent.rules[0]",
            15,
            "its currency",
        ),
        (
            _replace('tools = ["billing_invoice_void"]', 'tools = "billing_invoice_void"'),
            "principals.alice.rules[0].tools",
            31,
            "not one string",
        ),
    ],
)
def test_errors_name_the_key_and_line(text: str, key: str, line: int | None, fragment: str) -> None:
    with pytest.raises(PolicyFileError) as info:
        parse_policy(text, source="policy.toml")
    error = info.value
    assert (error.key, error.line) == (key, line)
    assert fragment in error.reason
    assert str(error).startswith("policy.toml")
    assert isinstance(error, UsageError)


def test_toml_syntax_errors_name_the_line() -> None:
    with pytest.raises(PolicyFileError) as info:
        parse_policy(EXAMPLE + "\n[broken\n", source="p.toml")
    assert info.value.line == EXAMPLE.count("\n") + 2
    assert "not valid TOML" in str(info.value)


def test_a_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "absent.toml"
    with pytest.raises(PolicyFileError) as info:
        load_policy(missing)
    assert info.value.path == str(missing)
