"""Waiting for a forked child that may hang on a lock it inherited held."""

from __future__ import annotations

import os
import signal
import time

import pytest

__all__ = ["child_exit_code"]


def child_exit_code(pid: int, *, hung: str, within: float = 10.0) -> int:
    """The exit code of the forked child ``pid``; one still running after ``within`` seconds
    is killed and the test fails with ``hung`` (what it blocked on)."""
    deadline = time.monotonic() + within
    while (waited := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.01)
    if waited == (0, 0):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(hung)
    return os.waitstatus_to_exitcode(waited[1])
