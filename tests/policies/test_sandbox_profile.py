from __future__ import annotations

import pytest
from pydantic import ValidationError

from airlock.policies import (
    FORBIDDEN_SYSCALLS,
    SECCOMP_ALLOWED_SYSCALLS,
    SandboxProfile,
    render_docker_seccomp,
    seccomp_profile_hash,
)

# Calls the design names (and engines' default profiles have let through): the deny list
# must keep holding them whatever else changes in it.
REQUIRED_ABSENT = ["io_uring_setup", "io_uring_enter", "io_uring_register", "ptrace", "mount",
                   "unshare", "keyctl", "bpf", "perf_event_open", "setns", "clone3"]  # fmt: skip


def test_defaults_are_the_hardened_profile() -> None:
    profile = SandboxProfile()
    assert profile.language_mode == "restricted"
    assert profile.user == "65534:65534"
    assert profile.memory_bytes == 256 * 1024 * 1024
    assert profile.pids_limit == 64
    assert "os" not in profile.allowed_imports
    assert "json" in profile.allowed_imports


def test_every_field_is_described() -> None:
    for name, field in SandboxProfile.model_fields.items():
        assert field.description, name


@pytest.mark.parametrize("name", REQUIRED_ABSENT)
def test_the_deny_list_holds_the_named_calls(name: str) -> None:
    assert name in FORBIDDEN_SYSCALLS


@pytest.mark.parametrize("name", sorted(FORBIDDEN_SYSCALLS))
def test_dangerous_calls_are_not_allowed(name: str) -> None:
    assert name not in SECCOMP_ALLOWED_SYSCALLS
    rendered = render_docker_seccomp()
    allowed = [
        n
        for rule in rendered["syscalls"]
        if rule["action"] == "SCMP_ACT_ALLOW"
        for n in rule["names"]
    ]
    assert name not in allowed


@pytest.mark.parametrize("name", sorted(FORBIDDEN_SYSCALLS))
def test_a_profile_allowing_a_forbidden_call_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match=f"must not contain \\['{name}'\\]"):
        render_docker_seccomp(SECCOMP_ALLOWED_SYSCALLS | {name})
    with pytest.raises(ValidationError, match="must not contain"):
        SandboxProfile(seccomp_allowed=SECCOMP_ALLOWED_SYSCALLS | {name})


def test_default_action_is_errno() -> None:
    rendered = render_docker_seccomp()
    assert rendered["defaultAction"] == "SCMP_ACT_ERRNO"
    assert rendered["defaultErrnoRet"] == 1


def test_clone_is_allowed_only_without_namespace_flags() -> None:
    rules = {
        rule["names"][0]: rule
        for rule in render_docker_seccomp()["syscalls"]
        if len(rule["names"]) == 1
    }
    clone = rules["clone"]
    assert clone["args"] == [
        {"index": 0, "value": 0x7E020000, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}
    ]
    assert rules["clone3"] == {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("user", "0:0", "never runs as root"),
        ("user", "1000:0", "never runs as root"),
        ("user", "nobody", "numeric"),
        ("seccomp_allowed", SECCOMP_ALLOWED_SYSCALLS | {"ptrace"}, "must not contain"),
        ("memory_bytes", 1024, "greater than or equal"),
        ("timeout_s", 0, "greater than"),
        ("network_mode", "host", "Extra inputs"),
    ],
)
def test_unsafe_or_invalid_profiles_are_refused(field: str, value: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SandboxProfile.model_validate({field: value})


def test_hash_is_stable_and_sensitive() -> None:
    base = render_docker_seccomp()
    assert seccomp_profile_hash(base) == seccomp_profile_hash(render_docker_seccomp())
    smaller = render_docker_seccomp(SECCOMP_ALLOWED_SYSCALLS - {"getrandom"})
    assert seccomp_profile_hash(smaller) != seccomp_profile_hash(base)
