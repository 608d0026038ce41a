"""A read tool with a placeholder in its URL, through the registry: an argument that would
move the connection to another host is refused before the handler runs, so the grant judges
every host a call reaches (a grant that covers the declared pattern skips the per-call check)."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from airlock.policies import Grant, Principal, network
from airlock.tools import (
    AuditLog,
    CallContext,
    InvalidInputError,
    MemoryAuditStore,
    Registry,
    ToolError,
)

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"api.read"}))
GRANT = Grant(scopes=frozenset({"api.read"}), effects=(network("api.example.com"),))


class Status(BaseModel):
    url: str


def api_registry(ran: list[str]) -> Registry:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(
        effects=[network("https://api.example.com:{port}/v1/{page}")],
        scope="api.read",
    )
    def api_status_get(
        port: Annotated[str, Field(max_length=40)],
        page: Annotated[str, Field(max_length=40)] = "status",
    ) -> Status:
        """Get the API's status page. Use it to check the API is up. It changes nothing."""
        url = f"https://api.example.com:{port}/v1/{page}"
        ran.append(url)
        return Status(url=url)

    return registry


# (port, page, the answer's code (None: the read ran), the field it names)
CALLS = [
    ("8443", "status", None, ""),
    ("443", "a@localhost", None, ""),  # in the path: the host is still api.example.com
    ("443@localhost", "status", "invalid_input", "port"),
    ("443@evil.example", "status", "invalid_input", "port"),
    ("1@169.254.169.254", "status", "invalid_input", "port"),
    ("80a", "status", "invalid_input", "port"),
    ("443", "../admin", "invalid_input", "page"),
]


@pytest.mark.parametrize(("port", "page", "code", "field"), CALLS)
async def test_a_placeholder_value_cannot_move_the_host(
    port: str, page: str, code: str | None, field: str
) -> None:
    ran: list[str] = []
    registry = api_registry(ran)
    ctx = CallContext(principal=ALICE, grant=GRANT, run_id="run_1", caller="direct")
    call = registry.call("api_status_get", {"port": port, "page": page}, ctx)
    if code is None:
        assert (await call)["url"] == f"https://api.example.com:{port}/v1/{page}"
        (event,) = registry.audit.events()
        assert event.decision == "allow"
        assert [str(e) for e in event.effects] == [f"network({ran[0]})"]
        return
    with pytest.raises(ToolError) as info:
        await call
    assert info.value.code == code
    assert isinstance(info.value, InvalidInputError)
    assert [i.field for i in info.value.issues] == [field]
    assert ran == []  # refused before the handler
    assert all(event.decision != "allow" for event in registry.audit.events())
