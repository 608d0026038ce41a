from __future__ import annotations

from airlock import cli
from tests.public_api import assert_public_api

# The public API, changed only on purpose: a name added or removed fails this test.
PUBLIC_API = [
    "Settings",
    "app",
    "approvals_app",
    "audit_app",
    "default_ledger",
    "main",
    "parse_size",
]


def test_public_api_is_pinned() -> None:
    assert_public_api(cli, PUBLIC_API)
