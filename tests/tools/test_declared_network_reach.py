"""A declared network target is judged, end to end, where the call connects.

A rule naming a host or a path names every spelling of it a connection reads the same way
(``localh*:8080/`` under a deny on ``localhost:8080/**``, ``metadata.google.internal.`` and
``:0443`` under one on ``metadata.google.internal``): the real registry refuses the call and
the adapter never sends a request. A scheme's default port is one table for grants and the
runtime check: ``ftp://host`` is port 21 to both, so a tool a grant admits on port 21 is
stopped when it connects elsewhere. Each table is the contract: a spelling adds a row."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Annotated, Any

import httpx
import pytest
from pydantic import BaseModel, Field

from airlock.policies import (
    ApprovalPolicy,
    ApprovalRule,
    Grant,
    Principal,
    coverage,
    network,
)
from airlock.policies._network import DEFAULT_PORTS as POLICY_DEFAULT_PORTS
from airlock.tools import (
    AuditLog,
    CallContext,
    DeniedError,
    MemoryAuditStore,
    Registry,
    RestAdapter,
    parse_destination,
)
from airlock.tools._destination import DEFAULT_PORTS, destination_of

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"meta.read"}))


class Out(BaseModel):
    ok: bool


def _context(grant: Grant, approvals: ApprovalPolicy | None = None) -> CallContext:
    return CallContext(
        principal=ALICE,
        grant=grant,
        run_id="run_1",
        caller="direct",
        approvals=approvals or ApprovalPolicy(),
    )


# (declared effect, the adapter's base URL, the deny rule's target, whether the call is
# refused): a refused call sends no request
DENY = [
    ("http://localh*:8080/", "http://localhost:8080", "http://localhost:8080/**", True),
    ("http://localhost.:8080/{p}", "http://localhost.:8080", "localhost", True),
    ("https://metadata.google.internal./computeMetadata/v1/{p}",
     "https://metadata.google.internal./computeMetadata/v1",
     "https://metadata.google.internal/**", True),
    ("https://metadata.google.internal:0443/computeMetadata/v1/{p}",
     "https://metadata.google.internal:443/computeMetadata/v1",
     "https://metadata.google.internal/**", True),
    ("https://metadata.google.internal/computeMetadata/v1/{p}",
     "https://metadata.google.internal/computeMetadata/v1",
     "https://metadata.google.internal:0443/**", True),
    ("https://metadata.google.internal/computeMetadata/v1/{p}",  # (the control: as it was)
     "https://metadata.google.internal/computeMetadata/v1",
     "https://metadata.google.internal/**", True),
    ("https://api.example.com/v1/{p}", "https://api.example.com/v1",
     "https://metadata.google.internal/**", False),
    ("http://localh*:8080/", "http://localhost:8080", "http://localhost:8080/admin/**", False),
]  # fmt: skip


@pytest.mark.parametrize(("declared", "base", "rule", "refused"), DENY)
async def test_a_denied_spelling_of_a_host_or_path_sends_no_request(
    declared: str, base: str, rule: str, refused: bool
) -> None:
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"ok": True})

    api = RestAdapter(base, transport=httpx.MockTransport(answer))
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[network(declared)], scope="meta.read", destinations=api.destinations)
    async def meta_value_get(p: Annotated[str, Field(max_length=40)] = "token") -> Out:
        """Read a metadata value. Use it to test. It changes nothing."""
        return Out.model_validate(await api.get((p,) if "{p}" in declared else (), credential=None))

    rules = ApprovalPolicy((ApprovalRule(id="no-host", action="deny", effect="network",
                                         targets=(rule,)),))  # fmt: skip
    context = _context(Grant(scopes=frozenset({"meta.read"}), effects=(network("**"),)), rules)
    if refused:
        with pytest.raises(DeniedError):
            await registry.call("meta_value_get", {}, context)
        assert sent == []
    else:
        assert await registry.call("meta_value_get", {}, context) == {"ok": True}
        assert len(sent) == 1


def test_one_default_port_table_for_grants_and_the_runtime_check() -> None:
    assert {k: int(v) for k, v in POLICY_DEFAULT_PORTS.items()} == DEFAULT_PORTS


# (declared destination, port connected to, whether the runtime check lets it through)
PORTS = [
    ("ftp://files.example.com", 21, True),
    ("ftp://files.example.com", 2121, False),
    ("ftp://files.example.com:2121", 2121, True),
    ("https://files.example.com", 443, True),
    ("https://files.example.com", 8443, False),
    ("postgres://db.internal", 6432, True),  # a scheme without a default: any port
    ("files.example.com", 2121, True),
]


@pytest.mark.parametrize(("declared", "port", "allowed"), PORTS)
def test_a_left_out_port_is_the_default_a_grant_reads(
    declared: str, port: int, allowed: bool
) -> None:
    assert parse_destination(declared).allows_port(port) is allowed


@pytest.mark.parametrize(
    ("target", "port"),
    [("https://metadata.google.internal:0/computeMetadata/v1/x", 443),
     ("postgres://db.internal:0/x", 5432), ("http://localhost:0/x", 80)],
)  # fmt: skip
def test_a_resolved_target_on_port_0_connects_nowhere(target: str, port: int) -> None:
    # (read as no port, it meant the scheme's default, or any port for a scheme with none)
    found = destination_of(target)
    assert found is None or not found.allows_port(port)


@pytest.fixture
def listener() -> Iterator[tuple[int, list[Any]]]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    accepted: list[Any] = []

    def accept() -> None:
        try:
            while True:
                accepted.append(server.accept()[0])
        except OSError:
            return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    server.close()
    for connection in accepted:
        connection.close()


async def test_a_tool_a_grant_admits_on_the_ftp_port_is_stopped_elsewhere(
    listener: tuple[int, list[Any]],
) -> None:
    port, accepted = listener
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[network("ftp://localhost")], scope="meta.read")
    def files_listing_get() -> Out:
        """Get the listing of the FTP server. Use it to list files. It changes nothing."""
        socket.create_connection(("localhost", port), timeout=3).close()
        return Out(ok=True)

    grant = Grant(scopes=frozenset({"meta.read"}), effects=(network("ftp://localhost:21"),))
    assert coverage(grant, registry.specs()[0].effects[0]) == "full"  # the inventory's
    with pytest.raises(DeniedError, match="does not declare"):
        await registry.call("files_listing_get", {}, _context(grant))
    assert accepted == []
