"""An exception's text cannot forge a line of the operator log: its line breaks, carriage
returns and terminal sequences are escaped where its traceback is logged (the frames keep
their lines), and a tool error's detail is stored back without the call's Secret() values,
so every later log of it says what the audit log keeps."""

from __future__ import annotations

import logging
from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from airlock.policies import ApprovalPolicy, Grant, Principal, read
from airlock.tools import (
    AuditLog,
    MemoryAuditStore,
    Registry,
    RunAuthority,
    Secret,
    ToolError,
    UpstreamError,
)
from airlock.tools._step_text import failure_trace

pytestmark = pytest.mark.anyio

FORGED = "ERROR:airlock.audit:FORGED audit store lost 999 events"
PIN = "PIN-7731-s3cr3t"
ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"vault.read"}))
GRANT = Grant(scopes=frozenset({"vault.read"}), effects=(read("vault:**"),))

# name: what comes before the forged line
BREAKS = {
    "newline": "\n",
    "carriage return": "\r",
    "CRLF": "\r\n",
    "escape sequence": "\x1b[2K\x1b[1G",
    "line separator": "\u2028",
    "next line": "\x85",
}


def _raised(text: str, note: str) -> ValueError:
    try:
        raise ValueError(text)
    except ValueError as exc:
        exc.add_note(note)
        return exc


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_an_exceptions_text_and_notes_stay_on_its_last_line(case: str) -> None:
    brk = BREAKS[case]
    trace = failure_trace(_raised(f"bad card{brk}{FORGED}", f"note{brk}{FORGED}"), ())
    last = trace.splitlines()[-1]  # (str.splitlines() breaks at every one of them)
    assert last.startswith("ValueError: bad card")
    assert last.count("FORGED") == 2
    assert "\x1b" not in trace
    assert "\r" not in trace


class Item(BaseModel):
    name: str


def _registry() -> Registry:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("vault:item/{name}")], scope="vault.read")
    def vault_item_get(
        name: Annotated[str, Field(max_length=32)],
        pin: Annotated[str, Secret(), Field(max_length=64)],
    ) -> Item:
        """Read one vault item by name, unlocked by the user's PIN. Use it to read a
        stored note. It does not change anything."""
        if name == "echo":  # what a REST answer's body echoing the request would give
            raise UpstreamError(detail=f"POST /items -> 400; body 'wrong pin {pin}'")
        raise ValueError(f"bad item {name!r}\n{FORGED}")

    return registry


def _ctx() -> object:
    authority = RunAuthority(principal=ALICE, grant=GRANT, run_id="r1", approvals=ApprovalPolicy())
    return authority.context("direct", "r1:c1")


async def test_a_handlers_exception_is_one_record_with_no_forged_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = _registry()
    with caplog.at_level(logging.DEBUG, logger="airlock"), pytest.raises(ToolError):
        await registry.call("vault_item_get", {"name": "b", "pin": PIN}, _ctx())  # type: ignore[arg-type]
    (record,) = [r for r in caplog.records if "FORGED" in r.getMessage()]
    assert not any(line.startswith("ERROR:") for line in record.getMessage().splitlines())


async def test_a_tool_errors_detail_is_kept_without_the_secret() -> None:
    registry = _registry()
    with pytest.raises(ToolError) as info:
        await registry.call("vault_item_get", {"name": "echo", "pin": PIN}, _ctx())  # type: ignore[arg-type]
    assert info.value.detail == "POST /items -> 400; body 'wrong pin [redacted]'"
