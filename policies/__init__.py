"""The authority model: who may do what, under which limits. Pure and I/O-free."""

from policies._approval import ApprovalPolicy, ApprovalRule, Decision, Verdict
from policies._effects import (
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
from policies._errors import AirlockError, UsageError
from policies._grant import Grant
from policies._policy_file import Policy, PolicyFileError, load_policy, parse_policy
from policies._principal import SCOPE_PATTERN, Principal
from policies._sandbox_profile import LanguageMode, SandboxProfile
from policies._seccomp import (
    FORBIDDEN_SYSCALLS,
    SECCOMP_ALLOWED_SYSCALLS,
    render_docker_seccomp,
    seccomp_profile_hash,
)

__all__ = [
    "EFFECT_KINDS",
    "FORBIDDEN_SYSCALLS",
    "SCOPE_PATTERN",
    "SECCOMP_ALLOWED_SYSCALLS",
    "SIDE_EFFECT_KINDS",
    "AirlockError",
    "ApprovalPolicy",
    "ApprovalRule",
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
    "disclose",
    "load_policy",
    "network",
    "parse_policy",
    "read",
    "render_docker_seccomp",
    "seccomp_profile_hash",
    "spend",
    "write",
]
