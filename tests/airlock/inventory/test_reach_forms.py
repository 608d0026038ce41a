"""The inventory of tools whose reach is in their arguments: a URL tool lists the granted
patterns as its destinations, says ``network``, and shows its approval per target class."""

from __future__ import annotations

from airlock.inventory import (
    PolicyDocument,
    ToolEntry,
    build_inventory,
    render,
    sandbox_effects,
    subject_inventory,
)
from airlock.inventory._render import approval_text
from airlock.policies import parse_policy
from tests.airlock.harness.test_session_reach import WEB_POLICY
from tests.tools.test_reach_forms import Fetched, web_registry


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
