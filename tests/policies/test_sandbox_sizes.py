"""A profile's sizes have an upper bound: a size no engine takes is refused where the profile
is made, never at every run as a retryable failure."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from airlock.policies import PolicyFileError, SandboxProfile, parse_policy

TIB = 1024**4

# (field, value, accepted)
SIZES = [
    ("memory_bytes", TIB, True),
    ("memory_bytes", TIB + 1, False),
    ("memory_bytes", 2**63 - 1, False),
    ("memory_bytes", 10**30, False),
    ("tmpfs_bytes", TIB, True),
    ("tmpfs_bytes", TIB + 1, False),
    ("tmpfs_bytes", 10**30, False),
]


@pytest.mark.parametrize(("field", "value", "accepted"), SIZES)
def test_a_size_past_a_tebibyte_is_refused(field: str, value: int, accepted: bool) -> None:
    if accepted:
        assert getattr(SandboxProfile(**{field: value}), field) == value
        return
    with pytest.raises(ValidationError):
        SandboxProfile(**{field: value})


@pytest.mark.parametrize(("field", "value", "accepted"), [row for row in SIZES if not row[2]])
def test_a_policy_file_naming_too_large_a_size_is_refused_with_its_key(
    field: str, value: int, accepted: bool
) -> None:
    with pytest.raises(PolicyFileError) as refused:
        parse_policy(f"version = 1\n[sandbox]\n{field} = {value}\n")
    assert field in str(refused.value)
