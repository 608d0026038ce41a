"""The inventory says of a declared network target what a call does with it: a grant on
``/v1/**`` reaches a tool declaring ``https://{host}/v1`` (calls pass), a ``deny`` on a host
or path names every spelling a connection reads as it, and the destination is listed as the
connection reads it (no trailing dot, no leading zeros). Each row is one declaration."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from airlock.inventory import Subject, subject_inventory
from airlock.policies import ApprovalPolicy, ApprovalRule, Grant, Principal, network
from airlock.tools import AuditLog, MemoryAuditStore, Registry

ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"x.read"}))


class Out(BaseModel):
    ok: bool


# (declared target, granted pattern, deny rule target or None, reach, verdicts, destination)
ROWS = [
    ("https://{host}/v1", "https://api.example.com/v1/**", None,
     ("direct",), {("allow", "default")}, "https://*/v1"),
    ("http://localh*:8080/", "**", "http://localhost:8080/**",
     (), {("deny", "no-host")}, "http://localh*:8080"),
    ("https://metadata.google.internal./computeMetadata/v1/{p}", "**",
     "https://metadata.google.internal/**", (), {("deny", "no-host")},
     "https://metadata.google.internal/computeMetadata/v1/*"),
    ("https://metadata.google.internal:0443/computeMetadata/v1/{p}", "**",
     "https://metadata.google.internal/**", (), {("deny", "no-host")},
     "https://metadata.google.internal:443/computeMetadata/v1/*"),
    ("https://{host}/v2", "https://api.example.com/v1/**", None, (), {("allow", "default")},
     "https://*/v2"),
]  # fmt: skip


@pytest.mark.parametrize(("declared", "granted", "rule", "reach", "verdicts", "listed"), ROWS)
def test_the_inventory_says_what_a_call_does(
    declared: str,
    granted: str,
    rule: str | None,
    reach: tuple[str, ...],
    verdicts: set[tuple[str, str]],
    listed: str,
) -> None:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[network(declared)], scope="x.read")
    def api_value_get(
        host: Annotated[str, Field(max_length=100)] = "api.example.com",
        p: Annotated[str, Field(max_length=40)] = "token",
    ) -> Out:
        """Read a value. Use it to test. It changes nothing."""
        return Out(ok=True)

    rules = ApprovalPolicy(
        ()
        if rule is None
        else (ApprovalRule(id="no-host", action="deny", effect="network", targets=(rule,)),)
    )
    grant = Grant(scopes=frozenset({"x.read"}), effects=(network(granted),))
    subject = Subject(kind="principal", name="alice", principal=ALICE, grant=grant, approvals=rules)
    (tool,) = subject_inventory(registry, subject).tools
    assert tool.reach == reach
    assert {(c.verdict, c.rule) for c in tool.approval} == verdicts
    assert tool.destinations == (listed,)
