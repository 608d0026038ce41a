"""The inventory of tools whose reach is in their arguments: a URL tool lists the granted
patterns as its destinations, says ``network``, and shows its approval per target class."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from airlock.inventory import (
    PolicyDocument,
    Subject,
    ToolEntry,
    build_inventory,
    render,
    sandbox_effects,
    subject_inventory,
)
from airlock.inventory._render import approval_text
from airlock.policies import (
    ApprovalPolicy,
    Effect,
    Grant,
    Principal,
    network,
    parse_policy,
    read,
)
from airlock.tools import Registry
from tests.airlock.harness.test_session_reach import WEB_POLICY
from tests.tools.test_reach_forms import Fetched, web_registry

ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"web.read"}))


class Item(BaseModel):
    ok: bool


def web_entry() -> ToolEntry:
    document = PolicyDocument(parse_policy(WEB_POLICY, source="web"))
    inventory = subject_inventory(web_registry(Fetched()), document.principal("*"))
    (tool,) = inventory.tools
    return tool


def test_a_url_tool_lists_the_granted_patterns_as_its_destinations() -> None:
    tool = web_entry()
    assert tool.name == "web_page_fetch"
    assert tool.destinations == (
        "https://docs.example.com/**",
        "https://evil.example/**",
    )
    assert tool.network
    declared = {(e.declared, e.pattern, e.grant) for e in tool.effects}
    assert ("network({url})", "**", "partial") in declared


def test_a_url_tools_approval_is_shown_per_target_and_reaches_both_ways() -> None:
    tool = web_entry()
    cases = tool.approval
    assert [(c.targets, c.verdict, c.rule) for c in cases] == [
        (("network(https://docs.example.com/**)",), "allow", "docs-hosts"),
        ((), "ask", "other-hosts"),
    ]
    assert approval_text(cases) == (
        "for network(https://docs.example.com/**): allow (docs-hosts); otherwise: ask (other-hosts)"
    )
    assert tool.reach == ("code", "direct", "after_approval")


def test_the_rendered_reach_says_network() -> None:
    document = PolicyDocument(parse_policy(WEB_POLICY, source="web"))
    inventory = build_inventory(
        web_registry(Fetched()),
        document.select(),
        sandbox=sandbox_effects(document.policy.sandbox, image="img", image_digest="sha256:x"),
        registry="web:registry",
        policy="web.toml",
    )
    table = render(inventory, "markdown")
    assert "code, direct, after approval; network" in table
    assert "otherwise: ask (other-hosts)" in table


# -- what the summaries say of a URL tool ---------------------------------------------------

# the grant's network patterns -> the network labels of every summary of the URL tool: the
# patterns a call may match, never the declaration's own ``network(**)``
# granted patterns -> the summaries' labels, and those said to span every level below
URL_GRANTS = [
    (("https://docs.example.com/**", "*.python.org"),
     ("network(*.python.org)", "network(https://docs.example.com/**)"),
     ("network(https://docs.example.com/**)",)),
    (("docs.example.com",), ("network(docs.example.com)",), ()),
    (("**",), ("network(**)",), ("network(**)",)),  # every destination: then it is every one
    (("*",), ("network(*)",), ("network(*)",)),  # a URL's "*" allows every URL as well
    (("*://*",), ("network(*://*)",), ("network(*://*)",)),
    (("https://*",), ("network(https://*)",), ("network(https://*)",)),  # every https URL
    (("*.python.org",), ("network(*.python.org)",), ()),
]  # fmt: skip


@pytest.mark.parametrize(("granted", "labels", "spanning"), URL_GRANTS)
def test_a_url_tools_summaries_hold_the_granted_patterns(
    granted: tuple[str, ...], labels: tuple[str, ...], spanning: tuple[str, ...]
) -> None:
    grant = Grant(
        scopes=frozenset({"web.read"}),
        effects=(read("web:page/*"), *(network(pattern) for pattern in granted)),
    )
    subject = Subject(
        kind="principal", name="alice", principal=ALICE, grant=grant, approvals=ApprovalPolicy(())
    )
    inventory = subject_inventory(web_registry(Fetched()), subject)
    (tool,) = inventory.tools
    assert tool.destinations == tuple(sorted(granted))
    composed = inventory.composed
    for path in (composed.from_code, composed.direct):
        assert [e for e in path.effects if e.startswith("network(")] == list(labels)
    (total,) = [t for t in composed.totals if t.kind == "network"]
    assert (total.tools, total.patterns) == (1, labels)
    spans = [r for b in composed.broader_than_scope for r in b.reasons if "spans every" in r]
    assert spans == [f"{label} spans every level below its prefix" for label in spanning]


# effects, adapter destinations -> whether a call reaches the network: the inventory's flag
# and the harness's hints (never advertised read-only) read it the same way
NETWORK_ROWS = [
    ((read("api:item/*"),), ("http://127.0.0.1:8400",), True),  # a REST adapter's service
    ((read("api:item/*"),), ("api.example.com",), True),
    ((read("api:item/*"), network("api.example.com")), (), True),
    ((read("api:item/*"), network("{url}")), (), True),
    ((read("api:item/*"),), (), False),
]


@pytest.mark.parametrize(("effects", "hosts", "reaches"), NETWORK_ROWS)
def test_a_tool_with_destinations_reaches_the_network(
    effects: tuple[Effect, ...], hosts: tuple[str, ...], reaches: bool
) -> None:
    registry = Registry()

    @registry.tool(effects=list(effects), scope="api.read", destinations=hosts)
    def api_item_get(
        url: Annotated[str, Field(max_length=100)] = "https://api.example.com",
    ) -> Item:
        """Read an item. Use it to test. It changes nothing."""
        return Item(ok=True)

    grant = Grant(
        scopes=frozenset({"api.read"}), effects=(read("api:item/*"), network("api.example.com"))
    )
    principal = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"api.read"}))
    subject = Subject(
        kind="principal",
        name="alice",
        principal=principal,
        grant=grant,
        approvals=ApprovalPolicy(()),
    )
    (tool,) = subject_inventory(registry, subject).tools
    spec = registry.get("api_item_get")
    assert spec is not None
    assert (tool.network, spec.reaches_network) == (reaches, reaches)
