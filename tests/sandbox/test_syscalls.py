"""The container tests try every call of both deny lists: the tables they use keep up."""

from __future__ import annotations

from airlock.policies import FORBIDDEN_SYSCALLS
from tests.sandbox.guest_image import load_guest
from tests.sandbox.syscalls import (
    GUEST_CALLS,
    SYSCALL_ARGS,
    SYSCALL_NUMBERS,
    callable_here,
    expected_errno,
    guest_rule_keys,
)


def test_every_denied_call_has_a_number() -> None:
    assert sorted(SYSCALL_NUMBERS) == sorted(FORBIDDEN_SYSCALLS)
    assert set(SYSCALL_ARGS) <= FORBIDDEN_SYSCALLS


def test_the_calls_the_design_names_are_tried_on_this_machine() -> None:
    named = {"ptrace", "mount", "unshare", "keyctl", "io_uring_setup", "bpf", "perf_event_open",
             "setns", "clone3", "memfd_create", "execveat"}  # fmt: skip
    assert named <= set(callable_here())


def test_the_filter_answers_eperm_and_enosys_for_clone3() -> None:
    assert expected_errno("ptrace") == 1
    assert expected_errno("clone3") == 38


def test_every_guest_rule_is_tried() -> None:
    rules = load_guest("airlock_seccomp").RULES
    assert sorted(set(guest_rule_keys(rules))) == sorted(GUEST_CALLS)


def test_the_second_layer_refuses_what_the_issue_names() -> None:
    rules = load_guest("airlock_seccomp").RULES
    everywhere = {r.syscall for r in rules if set(r.modes) == {"restricted", "full"}}
    assert {"execve", "execveat", "socket", "ptrace", "personality", "memfd_create"} <= everywhere
    assert {"bind", "listen", "setsockopt"} <= everywhere  # no name of a program's outlives it
    restricted_only = {r.syscall for r in rules if r.modes == ("restricted",)}
    assert {"fork", "vfork", "clone"} <= restricted_only
