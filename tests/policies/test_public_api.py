from __future__ import annotations

from airlock import policies
from tests.public_api import assert_public_api

# The public API, changed only on purpose: a name added or removed fails this test.
PUBLIC_API = [
    "DISTINCT_USER",
    "EFFECT_KINDS",
    "FORBIDDEN_SYSCALLS",
    "SCOPE_PATTERN",
    "SECCOMP_ALLOWED_SYSCALLS",
    "SECCOMP_ARGUMENT_RULES",
    "SIDE_EFFECT_KINDS",
    "SPEND_LIMIT_RULE",
    "STRICTNESS",
    "AirlockError",
    "ApprovalCase",
    "ApprovalPolicy",
    "ApprovalRule",
    "ArgumentRule",
    "ContainerRuntime",
    "Coverage",
    "Decision",
    "Effect",
    "EffectArgumentError",
    "EffectKind",
    "Grant",
    "LanguageMode",
    "Policy",
    "PolicyFileError",
    "Principal",
    "SandboxProfile",
    "UsageError",
    "Verdict",
    "approval_cases",
    "breakpoints",
    "coverage",
    "covers",
    "currency_from_field",
    "disclose",
    "glob_regex",
    "load_policy",
    "may_share_text",
    "network",
    "parse_policy",
    "read",
    "refusal",
    "render_docker_seccomp",
    "seccomp_profile_hash",
    "spend",
    "target_classes",
    "verdict_at",
    "write",
]


def test_public_api_is_pinned() -> None:
    assert_public_api(policies, PUBLIC_API)


def test_the_authority_model_is_public() -> None:
    # What the tool layer builds on; the pin above holds it, this says why it must stay.
    for name in ("Principal", "Grant", "Effect", "ApprovalPolicy", "Policy", "load_policy"):
        assert name in PUBLIC_API


def test_policy_file_error_is_a_usage_error() -> None:
    assert issubclass(policies.PolicyFileError, policies.UsageError)
    assert policies.PolicyFileError.code == "policy_file"
