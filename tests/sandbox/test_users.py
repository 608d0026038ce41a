"""Which uid a container runs as: one of its own under the default profile, taken in turn
from a range no user of the host has; the profile's own ``uid:gid`` when it names one.
(``test_user_budgets.py`` shows what it keeps apart, in real containers.)"""

from __future__ import annotations

import os
import pwd

import pytest

from airlock.policies import SandboxProfile, UsageError
from airlock.sandbox import _users
from airlock.sandbox._users import FIRST_UID, UID_COUNT, container_user


def _uid(user: str) -> int:
    uid, gid = user.split(":")
    assert uid == gid
    return int(uid)


def test_each_container_takes_a_uid_of_its_own_that_no_host_user_has() -> None:
    taken = [_uid(container_user(SandboxProfile())) for _ in range(500)]
    assert len(set(taken)) == 500
    assert all(FIRST_UID <= uid < FIRST_UID + UID_COUNT < 2**31 for uid in taken)
    for uid in taken[:20]:
        with pytest.raises(KeyError):
            pwd.getpwuid(uid)


def test_a_profile_that_names_a_user_runs_every_container_as_it() -> None:
    profile = SandboxProfile(user="4000:4001")
    assert {container_user(profile) for _ in range(3)} == {"4000:4001"}


def test_uids_and_gids_the_host_knows_are_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    upcoming = _uid(container_user(SandboxProfile())) + 1
    known = {upcoming, upcoming + 1}  # a user, then a group, of the host
    monkeypatch.setattr(_users, "_known_to_host", lambda uid: uid in known)
    assert _uid(container_user(SandboxProfile())) == upcoming + 2


def test_a_host_that_knows_every_uid_in_reach_is_told_to_name_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_users, "_known_to_host", lambda uid: True)
    with pytest.raises(UsageError, match="fixed 'uid:gid'"):
        container_user(SandboxProfile())


def test_a_forked_process_takes_its_uids_from_another_point() -> None:
    # Two processes taking the same sequence would give their containers the same uids.
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # the child never returns to pytest
        try:
            os.write(writer, container_user(SandboxProfile()).encode())
        finally:
            os._exit(0)
    os.close(writer)
    os.waitpid(child, 0)
    with os.fdopen(reader) as pipe:
        in_child = _uid(pipe.read())
    in_parent = _uid(container_user(SandboxProfile()))
    assert abs(in_child - in_parent) > 1000
