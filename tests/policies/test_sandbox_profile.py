from __future__ import annotations

import pytest
from pydantic import ValidationError

from airlock.policies import (
    FORBIDDEN_SYSCALLS,
    SECCOMP_ALLOWED_SYSCALLS,
    SECCOMP_ARGUMENT_RULES,
    SandboxProfile,
    render_docker_seccomp,
    seccomp_profile_hash,
)

# Calls the design names (and engines' default profiles have let through): the deny list
# must keep holding them whatever else changes in it.
REQUIRED_ABSENT = ["io_uring_setup", "io_uring_enter", "io_uring_register", "ptrace", "mount",
                   "unshare", "keyctl", "bpf", "perf_event_open", "setns", "clone3",
                   "memfd_create", "execveat"]  # fmt: skip


def test_defaults_are_the_hardened_profile() -> None:
    profile = SandboxProfile()
    assert profile.language_mode == "restricted"
    assert profile.runtime == "runc"
    assert profile.user == "distinct"  # a uid and gid of each container's own
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
        ("user", "Distinct", "numeric"),
        ("user", "distinct:1", "numeric"),
        ("user", "0" * 5000 + "0:1", "never runs as root"),
        ("user", "1000:" + "0" * 5000 + "9" * 11, "at most"),
        ("cpus", 1e-10, "greater than or equal to 0.01"),
        ("cpus", 0.009, "greater than or equal to 0.01"),
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


def _rules_for(name: str, runtime: str = "runc") -> list[dict[str, object]]:
    rendered = render_docker_seccomp(runtime=runtime)  # type: ignore[arg-type]
    return [rule for rule in rendered["syscalls"] if name in rule["names"]]


@pytest.mark.parametrize("name", sorted(SECCOMP_ARGUMENT_RULES))
def test_a_call_with_argument_rules_is_allowed_only_with_those_values(name: str) -> None:
    rule = SECCOMP_ARGUMENT_RULES[name]
    rendered = _rules_for(name)
    # One rule per allowed value (Docker ANDs a rule's conditions), never unconditionally.
    assert len(rendered) == len(rule.values)
    for entry, value in zip(rendered, rule.values, strict=True):
        assert entry["names"] == [name]
        assert entry["action"] == "SCMP_ACT_ALLOW"
        [condition] = entry["args"]  # type: ignore[misc]
        assert condition["index"] == rule.index
        assert condition["op"] == rule.op
        if rule.mask is None:
            assert (condition["value"], condition["valueTwo"]) == (value, 0)
        else:
            assert (condition["value"], condition["valueTwo"]) == (rule.mask, value)


@pytest.mark.parametrize("name", ["socket", "socketpair"])
def test_sockets_are_unix_only(name: str) -> None:
    assert SECCOMP_ARGUMENT_RULES[name].values == (1,)  # AF_UNIX; AF_VSOCK (40) and all others fail


def test_personality_only_queries_or_keeps_per_linux() -> None:
    assert SECCOMP_ARGUMENT_RULES["personality"].values == (0x0, 0xFFFFFFFF)


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_the_filter_renders_for_each_runtime(runtime: str) -> None:
    profile = SandboxProfile.model_validate({"runtime": runtime})
    clone3 = _rules_for("clone3", runtime)
    if runtime == "runc":
        assert clone3 == [{"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}]
    else:
        # gVisor's kernel answers clone3 ENOSYS itself; its enforcement cannot set an errno.
        assert [r["action"] for r in clone3] == ["SCMP_ACT_ALLOW"]
    assert profile.docker_seccomp() == render_docker_seccomp(runtime=profile.runtime)


def test_runsc_adds_gvisors_own_threads_to_the_pids_limit() -> None:
    assert SandboxProfile(pids_limit=64).engine_pids_limit == 64
    gvisor = SandboxProfile(pids_limit=64, runtime="runsc")
    assert gvisor.engine_pids_limit > 64 + 60  # gVisor idles at about 60 host threads


def test_an_unknown_runtime_is_refused() -> None:
    with pytest.raises(ValidationError, match="runc"):
        SandboxProfile.model_validate({"runtime": "kata"})
