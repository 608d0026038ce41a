"""The authority model: who may do what, under which limits. Pure and I/O-free."""

from airlock.policies._approval import ApprovalPolicy, ApprovalRule, Decision, Verdict
from airlock.policies._effects import (
    EFFECT_KINDS,
    SIDE_EFFECT_KINDS,
    Effect,
    EffectArgumentError,
    EffectKind,
    disclose,
    network,
    read,
    spend,
    write,
)
from airlock.policies._errors import AirlockError, UsageError
from airlock.policies._grant import Grant
from airlock.policies._patterns import covers, glob_regex, may_share_text
from airlock.policies._policy_file import Policy, PolicyFileError, load_policy, parse_policy
from airlock.policies._principal import SCOPE_PATTERN, Principal
from airlock.policies._reach import (
    SPEND_LIMIT_RULE,
    STRICTNESS,
    ApprovalCase,
    Coverage,
    approval_cases,
    breakpoints,
    coverage,
    refusal,
    target_classes,
    verdict_at,
)
from airlock.policies._sandbox_profile import DISTINCT_USER, LanguageMode, SandboxProfile
from airlock.policies._seccomp import (
    FORBIDDEN_SYSCALLS,
    SECCOMP_ALLOWED_SYSCALLS,
    SECCOMP_ARGUMENT_RULES,
    ArgumentRule,
    ContainerRuntime,
    render_docker_seccomp,
    seccomp_profile_hash,
)
from airlock.policies._spend import currency_from_field

__all__ = [
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
