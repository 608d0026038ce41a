"""What a session says about reach: tools that reach the network are not read-only, a read a
rule asks about pauses like a write and runs once approved, and asking again for what was
already committed is answered as such."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from airlock import Harness, ModelResult
from airlock.frontends.mcp import mcp_tool
from airlock.harness import NoToolsWarning
from airlock.policies import Principal, network, parse_policy, read
from airlock.sandbox.testing import ScriptedBackend
from airlock.tools import MemoryAuditStore, Registry, SQLiteLedgerStore, approve_preview
from tests.airlock.session_world import World
from tests.tools.test_reach_forms import Fetched, web_registry

pytestmark = pytest.mark.anyio

WEB_POLICY = """
version = 1

[roles.web_reader]
scopes = ["web.read"]
effects = ["read(web:page/*)", "network(https://docs.example.com/**)", "network(https://evil.example/**)"]

[[roles.web_reader.rules]]
id = "docs-hosts"
action = "allow"
effect = "network"
targets = ["https://docs.example.com/**"]

[[roles.web_reader.rules]]
id = "other-hosts"
action = "ask"
effect = "network"

[principals."*"]
roles = ["web_reader"]
"""
ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"web.read"}))
DOCS = "https://docs.example.com/guide"
EVIL = "https://evil.example/page"


class Web:
    def __init__(self, root: Path, *, ledger: bool = True) -> None:
        self.fetched = Fetched()
        self.ledger = SQLiteLedgerStore(root / "ledger.db") if ledger else None
        self.harness = Harness(
            web_registry(self.fetched),
            parse_policy(WEB_POLICY, source="web"),
            ScriptedBackend([]),
            self.ledger,
            audit=MemoryAuditStore(),
        )

    def close(self) -> None:
        if self.ledger is not None:
            self.ledger.close()


@pytest.fixture
def web(tmp_path: Path) -> Iterator[Web]:
    w = Web(tmp_path)
    yield w
    w.close()


def body(result: ModelResult) -> Any:
    return json.loads(result.content)


# -- hints ----------------------------------------------------------------------------------


def test_a_tool_that_reaches_the_network_is_not_advertised_read_only(tmp_path: Path) -> None:
    world = World(tmp_path, ScriptedBackend([]))
    try:
        tools = {t.name: t for t in world.session().tools()}
    finally:
        world.close()
    fetch = tools["orders_status_get"]  # read(orders:...) + network(api.orders.example)
    assert (fetch.read_only, fetch.open_world, fetch.destructive) == (False, True, False)
    plain = tools["billing_invoice_get"]
    assert (plain.read_only, plain.open_world) == (True, False)
    # Its programs may call orders_status_get: execute_code reaches the network too.
    execute = tools["execute_code"]
    assert (execute.read_only, execute.open_world, execute.destructive) == (False, True, False)
    hints = mcp_tool(fetch).annotations
    assert hints is not None
    assert (hints.read_only_hint, hints.open_world_hint) == (False, True)
    closed = mcp_tool(plain).annotations
    assert closed is not None
    assert (closed.read_only_hint, closed.open_world_hint) == (True, False)


ITEM_POLICY = """
version = 1

[principals."*"]
scopes = ["api.read"]
effects = ["read(api:item/*)", "network(api.example.com)"]
"""


class Item(BaseModel):
    ok: bool


# adapter destinations, declared network effects -> (read_only, open_world) of the tool and
# of execute_code, whose programs may call it: an adapter's service is the network too
HINT_ROWS = [
    (("http://127.0.0.1:8400",), (), (False, True)),  # a REST adapter's service
    (("api.example.com",), (), (False, True)),
    ((), ("api.example.com",), (False, True)),
    ((), (), (True, False)),
]


@pytest.mark.parametrize(("hosts", "declared", "hints"), HINT_ROWS)
def test_a_tool_whose_adapter_has_destinations_is_not_advertised_read_only(
    hosts: tuple[str, ...], declared: tuple[str, ...], hints: tuple[bool, bool]
) -> None:
    registry = Registry()

    @registry.tool(
        effects=[read("api:item/*"), *map(network, declared)],
        scope="api.read",
        callers={"direct", "code"},
        destinations=hosts,
    )
    def api_item_get() -> Item:
        """Read an item. Use it to test. It changes nothing."""
        return Item(ok=True)

    harness = Harness(
        registry,
        parse_policy(ITEM_POLICY, source="item"),
        ScriptedBackend([]),
        audit=MemoryAuditStore(),
    )
    principal = Principal(user_id="bob", tenant_id="acme", scopes=frozenset({"api.read"}))
    tools = {t.name: t for t in harness.session(principal).tools()}
    for name in ("api_item_get", "execute_code"):
        tool = tools[name]
        assert (tool.read_only, tool.open_world) == hints, name
        annotations = mcp_tool(tool).annotations
        assert annotations is not None
        assert (annotations.read_only_hint, annotations.open_world_hint) == hints, name


def test_execute_code_without_network_tools_is_read_only(web: Web) -> None:
    narrow = Principal(user_id="bob", tenant_id="acme", scopes=frozenset())
    with pytest.warns(NoToolsWarning):  # no tools at all: the harness warns, and still offers
        session = web.harness.session(narrow)
    (execute,) = session.tools()
    assert (execute.read_only, execute.open_world) == (True, False)


# -- a read a person approves ---------------------------------------------------------------


async def test_an_asked_read_pauses_and_runs_once_approved(web: Web) -> None:
    session = web.harness.session(ALICE)
    ok = await session.call("web_page_fetch", {"url": DOCS})
    assert (ok.is_error, body(ok)["url"]) == (False, DOCS)

    paused = await session.call("web_page_fetch", {"url": EVIL})
    assert (paused.is_error, paused.code) == (False, "needs_approval")
    waiting = body(paused)
    assert waiting["effects"] == ["read(web:page/*)", f"network({EVIL})"]
    assert "this call waits for a person" in waiting["message"]
    assert web.fetched.urls == [DOCS]
    still = await session.resume(waiting["preview_id"])
    assert still.code == "needs_approval"

    assert web.ledger is not None
    approve_preview(web.ledger, waiting["preview_id"], approver="carol", now=0.0)
    done = await session.resume(waiting["preview_id"])
    assert (done.is_error, done.code) == (False, None)
    assert body(done)["status"] == "done"
    assert body(done)["result"] == {"url": EVIL, "text": f"text of {EVIL}"}
    assert web.fetched.urls == [DOCS, EVIL]

    asked = await session.call("web_page_fetch", {"url": EVIL})
    assert (asked.is_error, asked.code) == (False, "already_committed")
    assert body(asked)["result"] == {"url": EVIL, "text": f"text of {EVIL}"}
    assert web.fetched.urls == [DOCS, EVIL]  # once


async def test_a_read_that_always_waits_is_not_offered_without_a_ledger(tmp_path: Path) -> None:
    web = Web(tmp_path, ledger=False)
    session = web.harness.session(ALICE)
    names = [t.name for t in session.tools()]
    assert "web_page_fetch" in names  # some calls need no approval
    answer = await session.call("web_page_fetch", {"url": EVIL})
    assert (answer.is_error, answer.code) == (True, "denied")
    assert "no approval ledger" in body(answer)["message"]

    only_asks = WEB_POLICY.replace('action = "allow"', 'action = "ask"')
    harness = Harness(
        web_registry(Fetched()),
        parse_policy(only_asks, source="asks"),
        ScriptedBackend([]),
        audit=MemoryAuditStore(),
    )
    with pytest.warns(NoToolsWarning, match="web_page_fetch"):
        offered = [t.name for t in harness.session(ALICE).tools()]
    assert offered == ["execute_code"]


# -- asked again after its commit -----------------------------------------------------------


async def test_asking_again_for_a_committed_write_answers_already_committed(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, ScriptedBackend([]), action="allow")
    try:
        session = world.session()
        args = {"invoice_id": "inv_3", "reason": "duplicate"}
        first = await session.call("billing_refund_create", args)
        assert body(first)["status"] == "committed"
        again = await session.call("billing_refund_create", args)
        assert (again.is_error, again.code) == (False, "already_committed")
        answer = body(again)
        assert answer["status"] == "already_committed"
        assert answer["receipt"] == body(first)["receipt"]
        assert answer["preview_id"] == body(first)["preview_id"]
        assert "not sent again" in answer["message"]
        assert world.system.sends() == 1
        finals = [
            (e.outcome, e.code)
            for e in world.harness.audit.events(run_id=session.run_id)
            if e.final and e.tool == "billing_refund_create"
        ]
        assert finals == [("preview", "needs_approval"), ("preview", "already_committed")]
    finally:
        world.close()
