"""What a direct call's failure puts in the operator log: never a ``Secret()`` argument (a
validator's exception quoting it, a tool error's detail echoing it), and never a line the
failure's text forged; the model gets a typed answer, the session never raises."""

from __future__ import annotations

import logging
from typing import Annotated

import pytest
from pydantic import AfterValidator, BaseModel, Field

from airlock import Harness
from airlock.policies import read
from airlock.sandbox.testing import ScriptedBackend
from airlock.tools import AuditLog, MemoryAuditStore, Secret, UpstreamError
from tests.airlock.session_world import ALICE, policy
from tests.tools.billing import Handled, build_registry

pytestmark = pytest.mark.anyio

PIN = "PIN-7731-SECRET"
FORGED = "ERROR:airlock.audit:FORGED audit store lost 999 events"


def _known(pin: str) -> str:
    if pin.startswith("PIN"):
        raise RuntimeError(f"invalid literal for int() with base 10: {pin!r}")
    return pin


class Item(BaseModel):
    name: str


def _harness() -> Harness:
    tools = build_registry(Handled())
    tools.audit = AuditLog(MemoryAuditStore())

    @tools.tool(effects=[read("billing:card/{name}")], scope="billing.read")
    def billing_card_check(
        name: Annotated[str, Field(max_length=32)],
        pin: Annotated[str, Secret(), AfterValidator(_known), Field(max_length=64)],
    ) -> Item:
        """Check one card by name with the user's PIN. Use it to verify a card. It does
        not change anything."""
        if name == "echo":  # what a REST answer's body echoing the request would give
            raise UpstreamError(detail=f"POST /cards/check -> 400; body 'wrong pin {pin}'")
        raise ValueError(f"bad card {name!r}\r\n{FORGED}")

    return Harness(tools, policy(), ScriptedBackend([]))


# name: (the arguments, the code answered)
CASES = {
    "validator quotes the PIN": ({"name": "a", "pin": PIN}, "invalid_input"),
    "detail echoes the PIN": ({"name": "echo", "pin": "1234-" + PIN[3:]}, "upstream"),
    "text forges a log line": ({"name": "forge", "pin": "1234"}, "upstream"),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_failed_direct_call_logs_no_secret_and_no_forged_line(
    case: str, caplog: pytest.LogCaptureFixture
) -> None:
    arguments, code = CASES[case]
    harness = _harness()
    session = harness.session(ALICE)
    with caplog.at_level(logging.DEBUG, logger="airlock"):
        result = await session.call("billing_card_check", arguments)
    assert result.is_error
    assert result.code == code
    secret = arguments["pin"]
    for record in caplog.records:
        message = record.getMessage()
        assert secret not in message
        assert PIN not in message
        assert record.exc_info is None
        assert not any(line.startswith("ERROR:airlock.audit") for line in message.splitlines())
    harness.audit.flush()
    events = harness.audit.events(run_id=session.run_id)
    assert events
    assert all(secret not in (e.detail or "") for e in events)
