"""What a session tells the model about proposals from code, before any program runs: the
``propose`` namespace appears only for the writes the contract and the policy allow."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from airlock import Harness
from airlock.inventory import load_policy_document
from airlock.sandbox.testing import ScriptedBackend
from airlock.tools import SQLiteLedgerStore
from examples.billing import DEMO_POLICY, build_billing_registry

pytestmark = pytest.mark.anyio


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    registry = build_billing_registry("http://127.0.0.1:9", {})
    yield Harness(registry, load_policy_document(DEMO_POLICY).policy, ScriptedBackend([]), ledger)
    ledger.close()


def _execute_code(harness: Harness, user: str) -> str:
    principal = load_policy_document(DEMO_POLICY).principal(user).principal
    return harness.session(principal).tools()[0].description


def test_a_principal_whose_policy_allows_it_sees_what_it_may_propose(harness: Harness) -> None:
    description = _execute_code(harness, "alice")
    assert "class propose:" in description
    assert "    def billing_refund_create(" in description
    assert "a program may propose the ones listed under `propose`" in description


def test_a_principal_without_it_sees_no_propose_namespace(harness: Harness) -> None:
    description = _execute_code(harness, "bob")
    assert "propose" not in description
    assert "Changes are never made from code" in description


async def test_resuming_a_batch_of_another_session_is_not_found(harness: Harness) -> None:
    principal = load_policy_document(DEMO_POLICY).principal("alice").principal
    result = await harness.session(principal).resume("pb_" + "0" * 24)
    assert result.is_error
    assert json.loads(result.content)["error"] == "not_found"
