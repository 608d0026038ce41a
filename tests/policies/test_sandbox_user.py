"""The profile's ``user``: ``distinct`` or a fixed non-root ``uid:gid`` the kernel can hold.

A value refused here would otherwise pass the policy file and fail every run at the engine,
as a retryable sandbox failure that no retry mends.
"""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from airlock.policies import DISTINCT_USER, PolicyFileError, SandboxProfile, parse_policy

ACCEPTED = [
    DISTINCT_USER,
    "1000:1000",
    "1:1",
    "65534:65534",
    "4294967294:4294967294",
    "00000000000000001000:1000",  # the engine reads it as 1000
    "0" * 5000 + "1000:1000",  # (int() of the whole text would be refused)
]

# (value, a fragment of the message)
REFUSED = [
    ("0:0", "never runs as root"),
    ("1000:0", "never runs as root"),
    ("0:1000", "never runs as root"),
    ("000:1", "never runs as root"),
    ("nobody", "numeric"),
    ("Distinct", "numeric"),
    ("distinct:1", "numeric"),
    ("1000", "numeric"),
    ("1000:", "numeric"),
    (":1000", "numeric"),
    ("1000:1000:1000", "numeric"),
    (" 1000:1000", "numeric"),
    ("1000:1000\n", "numeric"),
    ("+1000:1000", "numeric"),
    ("-1:1000", "numeric"),
    ("1_000:1000", "numeric"),
    # digits of other scripts: str.isdigit() says yes, the engine says no
    ("\u0661\u0660\u0660\u0660:\u0661\u0660\u0660\u0660", "numeric"),
    ("\uff11\uff10\uff10\uff10:1000", "numeric"),
    ("\u00b2:1", "numeric"),
    # ids a 32-bit uid_t cannot hold; 4294967295 is (uid_t) -1, "no id"
    ("4294967295:1000", "at most 4294967294"),
    ("1000:4294967295", "at most 4294967294"),
    ("99999999999999999999:1", "at most 4294967294"),
    ("1" * 5000 + ":1", "at most 4294967294"),
]


@pytest.mark.parametrize("value", ACCEPTED)
def test_a_user_the_engine_can_run_as_is_accepted(value: str) -> None:
    assert SandboxProfile(user=value).user == value


@pytest.mark.parametrize(("value", "fragment"), REFUSED)
def test_a_user_no_run_could_use_is_refused(value: str, fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        SandboxProfile(user=value)
    assert fragment in str(info.value)


@pytest.mark.parametrize(("value", "fragment"), REFUSED)
def test_a_policy_file_names_the_user_it_refuses(value: str, fragment: str) -> None:
    text = f"version = 1\n[sandbox]\nuser = {json.dumps(value)}\n"
    with pytest.raises(PolicyFileError) as info:
        parse_policy(text, source="p.toml")
    assert (info.value.key, info.value.line) == ("sandbox.user", 3)
    assert fragment in info.value.reason
