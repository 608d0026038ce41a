from __future__ import annotations

from airlock import policies

# The names this package owes the tool layer; other parts of policies add their own.
AUTHORITY_API = {
    "EFFECT_KINDS",
    "SCOPE_PATTERN",
    "SIDE_EFFECT_KINDS",
    "AirlockError",
    "ApprovalPolicy",
    "ApprovalRule",
    "Decision",
    "Effect",
    "EffectArgumentError",
    "EffectKind",
    "Grant",
    "Policy",
    "PolicyFileError",
    "Principal",
    "UsageError",
    "Verdict",
    "disclose",
    "load_policy",
    "network",
    "parse_policy",
    "read",
    "spend",
    "write",
}


def test_authority_api_is_exported() -> None:
    assert set(policies.__all__) >= AUTHORITY_API


def test_all_is_sorted_unique_and_resolves() -> None:
    names = policies.__all__
    assert len(names) == len(set(names))
    for name in names:
        assert getattr(policies, name) is not None


def test_policy_file_error_is_a_usage_error() -> None:
    assert issubclass(policies.PolicyFileError, policies.UsageError)
    assert policies.PolicyFileError.code == "policy_file"
