"""The container tests try every call of the deny list: the table they use keeps up with it."""

from __future__ import annotations

from airlock.policies import FORBIDDEN_SYSCALLS
from tests.sandbox.syscalls import SYSCALL_ARGS, SYSCALL_NUMBERS, callable_here, expected_errno


def test_every_denied_call_has_a_number() -> None:
    assert sorted(SYSCALL_NUMBERS) == sorted(FORBIDDEN_SYSCALLS)
    assert set(SYSCALL_ARGS) <= FORBIDDEN_SYSCALLS


def test_the_calls_the_design_names_are_tried_on_this_machine() -> None:
    named = {"ptrace", "mount", "unshare", "keyctl", "io_uring_setup", "bpf", "perf_event_open",
             "setns", "clone3"}  # fmt: skip
    assert named <= set(callable_here())


def test_the_filter_answers_eperm_and_enosys_for_clone3() -> None:
    assert expected_errno("ptrace") == 1
    assert expected_errno("clone3") == 38
