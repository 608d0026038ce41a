"""Code that admission runs for a tool (a validator of its arguments, an approval policy)
may raise anything: the caller gets a typed error, never that exception, and the operator
log gets its traceback once, without the call's ``Secret()`` values."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated

import pytest
from pydantic import AfterValidator, BaseModel, Field

from airlock.policies import ApprovalPolicy, Decision, Effect, Grant, Principal, read
from airlock.tools import (
    AuditLog,
    MemoryAuditStore,
    Registry,
    RunAuthority,
    Secret,
    ToolError,
)

pytestmark = pytest.mark.anyio

PIN = "PIN-7731-s3cr3t"
ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"vault.read"}))
GRANT = Grant(scopes=frozenset({"vault.read"}), effects=(read("vault:**"),))

_RAISE: list[BaseException] = []
"""What the validator raises (set by each row)."""


def _check(pin: str) -> str:
    if _RAISE:
        raise _RAISE[0]
    return pin


class Item(BaseModel):
    name: str


@dataclass(frozen=True)
class BrokenRules(ApprovalPolicy):
    """Approval rules whose store fails while a call is judged."""

    def decide(self, tool: str, effects: Sequence[Effect], *, reversible: bool) -> Decision:
        raise RuntimeError("the rule store is down")


def _registry() -> Registry:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("vault:item/{name}")], scope="vault.read")
    def vault_item_check(
        name: Annotated[str, Field(max_length=32)],
        pin: Annotated[str, Secret(), AfterValidator(_check), Field(max_length=64)],
    ) -> Item:
        """Check one vault item by name against the user's PIN. Use it before reading a
        note. It does not change anything."""
        return Item(name=name)

    return registry


# name: (what the validator raises, the approval rules, the code answered or the exception
# class raised as it is, the audit event's outcome and stage)
ROWS: dict[str, tuple[BaseException | None, ApprovalPolicy, str | type, str, str]] = {
    "validator RuntimeError": (
        RuntimeError(f"invalid literal for int() with base 10: {PIN!r}"),
        ApprovalPolicy(),
        "invalid_input",
        "error",
        "validate",
    ),
    "validator TypeError": (
        TypeError(f"unhashable: [{PIN}]"),
        ApprovalPolicy(),
        "invalid_input",
        "error",
        "validate",
    ),
    "validator KeyError": (KeyError(PIN), ApprovalPolicy(), "invalid_input", "error", "validate"),
    "approval rules RuntimeError": (None, BrokenRules(), "upstream", "error", "authorize"),
    "validator cancelled": (
        asyncio.CancelledError(PIN),
        ApprovalPolicy(),
        asyncio.CancelledError,
        "unknown",
        "validate",
    ),
}


@pytest.mark.parametrize("case", sorted(ROWS))
async def test_an_exception_raised_during_admission_is_answered_typed_and_logged_clean(
    case: str, caplog: pytest.LogCaptureFixture
) -> None:
    raised, approvals, expected, outcome, stage = ROWS[case]
    _RAISE[:] = [] if raised is None else [raised]
    registry = _registry()
    ctx = RunAuthority(principal=ALICE, grant=GRANT, run_id="r1", approvals=approvals).context(
        "direct", "r1:c1"
    )
    call: Callable[[], object] = lambda: registry.call(  # noqa: E731
        "vault_item_check", {"name": "n1", "pin": PIN}, ctx
    )
    with caplog.at_level(logging.DEBUG, logger="airlock"):
        if isinstance(expected, str):
            with pytest.raises(ToolError) as info:
                await call()  # type: ignore[misc]
            assert info.value.code == expected
            assert PIN not in str(info.value)
            assert PIN not in (info.value.detail or "")
            assert info.value.__cause__ is None
            assert info.value.__suppress_context__
            traces = [r for r in caplog.records if "Traceback" in r.getMessage()]
            assert len(traces) == 1, caplog.text  # logged once, with its traceback
            assert type(raised or RuntimeError()).__name__ in traces[0].getMessage()
        else:
            with pytest.raises(expected):
                await call()  # type: ignore[misc]
    assert PIN not in caplog.text
    assert all(r.exc_info is None for r in caplog.records)
    registry.audit.flush()
    (event,) = registry.audit.events(run_id="r1")
    assert (event.outcome, event.stage) == (outcome, stage)
    assert event.detail
    assert PIN not in event.detail
    _RAISE.clear()
