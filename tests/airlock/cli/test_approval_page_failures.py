"""The approval page when the ledger fails under it (locked by another process, the file
replaced) or holds a row that does not read back: the page says so, with the error's code,
and every other preview stays decidable; never a bare 500."""

from __future__ import annotations

import html
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

from airlock.cli._approval_page import ApprovalPage
from airlock.cli._approver import Approver
from airlock.tools import (
    LedgerLockedError,
    Preview,
    Registry,
    SQLiteLedgerStore,
    StepState,
    WritePath,
)
from airlock.tools.testing import refund_tool
from tests.airlock.cli import commit_policy
from tests.airlock.cli.test_approval_page import TOKEN, batch_of, browser, card, csrf, form_of
from tests.tools.test_write_world import ASK, INVOICES, Clock, World


@contextmanager
def swapped(path: Path) -> Iterator[None]:
    """Another file put in the ledger's place (a restore while the page runs)."""
    os.rename(path, path.with_suffix(".moved"))
    SQLiteLedgerStore(path).close()
    try:
        yield
    finally:
        os.replace(path.with_suffix(".moved"), path)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, clock=Clock())
    yield w
    w.close()


def own_page(world: World, *, commits: bool = True, name: str = "carol") -> ApprovalPage:
    """The page as `approvals serve` opens it: a store of its own, a short busy timeout."""
    store = SQLiteLedgerStore(world.root / "ledger.db", busy_timeout=0.1)
    registry = Registry()
    registry.register(refund_tool(world.system, INVOICES))
    writes, rules = (
        (WritePath(registry, store), commit_policy.policy()) if commits else (None, None)
    )
    approver = Approver(name, store, writes=writes, policy=rules)
    return ApprovalPage(approver, ledger="ledger.db", token=TOKEN, clock=world.clock)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Another process holds the ledger's write lock (readers still read: WAL)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=0)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


@contextmanager
def replaced(path: Path) -> Iterator[None]:
    """The file renamed away while the page has it open (and put back afterwards)."""
    os.rename(path, path.with_suffix(".moved"))
    try:
        yield
    finally:
        os.rename(path.with_suffix(".moved"), path)


FAULTS: dict[str, tuple[Callable[[Path], AbstractContextManager[None]], str, bool]] = {
    "locked by another process": (locked, "ledger_locked", True),
    "the file renamed away": (replaced, "ledger_replaced", False),
}
"""How the ledger fails, the code the page names, and whether it says to try again."""
ROUTES = ["approve", "deny", "approve-batch", "deny-batch"]


def said(client: TestClient) -> list[tuple[str, str]]:
    """The notice or error the page shows after a post."""
    return re.findall(r'<p class="(notice|error)" id="\1">([^<]*)</p>', client.get("/").text)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_ledger_failure_on_a_post_is_said_on_the_page(
    world: World, fault: str, route: str
) -> None:
    make, code, again = FAULTS[fault]
    waiting = anyio.run(lambda: world.prepare("inv_3", approvals=ASK))
    batch, items = batch_of(world, "inv_5", "inv_6")
    client = browser(own_page(world))
    form = {"csrf": csrf(client), **form_of(route, waiting, batch)}
    with make(world.root / "ledger.db"):
        posted = client.post(route, data=form)
    assert posted.status_code == 303, posted.text
    [(kind, text)] = said(client)
    assert kind == "error"
    assert text.startswith(f"{code}: "), text
    assert ("try again in a moment" in text) == again, text
    for preview in (waiting, *items):
        stored = world.ledger.preview(preview.id)
        assert stored is not None
        assert stored.state == "prepared"
    assert world.system.sends() == 0


UNREADABLE: dict[str, tuple[Callable[[Path], AbstractContextManager[None]], str, bool]] = {
    "the file renamed away": (replaced, "ledger_replaced", True),
    # (the other file's store took the ledger's WAL file with it: no way back)
    "another file in its place": (swapped, "ledger_replaced", False),
}
"""How the ledger fails, the code the page names, and whether the page is back once the
file is."""


@pytest.mark.parametrize("fault", sorted(UNREADABLE))
def test_a_ledger_that_cannot_be_read_answers_503_naming_the_code(world: World, fault: str) -> None:
    make, code, back = UNREADABLE[fault]
    waiting = anyio.run(lambda: world.prepare("inv_3", approvals=ASK))
    client = browser(own_page(world))
    with make(world.root / "ledger.db"):
        shown = client.get("/")
    assert shown.status_code == 503, shown.text
    assert f"{code}: " in shown.text
    assert "Traceback" not in shown.text
    if back:
        assert waiting.id in client.get("/").text


class FailingCommit(SQLiteLedgerStore):
    """A ledger that fails when a commit claims a step: after the approval is recorded."""

    def transition(self, preview_id: str, *, to: StepState, **kw: Any) -> Preview:
        if to == "sending":
            raise LedgerLockedError("the ledger is locked (a test's)", path=self.path)
        return super().transition(preview_id, to=to, **kw)


def test_a_failure_after_the_approval_was_recorded_says_the_approval_stands(
    world: World,
) -> None:
    waiting = anyio.run(lambda: world.prepare("inv_3", approvals=ASK))
    store = FailingCommit(world.root / "ledger.db")
    registry = Registry()
    registry.register(refund_tool(world.system, INVOICES))
    approver = Approver(
        "carol", store, writes=WritePath(registry, store), policy=commit_policy.policy()
    )
    client = browser(ApprovalPage(approver, ledger="ledger.db", token=TOKEN, clock=world.clock))
    form = {"csrf": csrf(client), "preview_id": waiting.id, "fingerprint": waiting.fingerprint}
    assert client.post("approve", data=form).status_code == 303
    [(kind, text)] = said(client)
    assert kind == "error"
    assert text.startswith("ledger_locked: "), text
    assert f"your approval of {waiting.id} stands" in text, text
    stored = world.ledger.preview(waiting.id)
    assert stored is not None
    assert stored.state == "approved"


DAMAGES: list[tuple[str, str, str]] = [
    ("effect not JSON", "UPDATE previews SET effect = '{' WHERE id = ?", "skipped"),
    ("effect not an object", "UPDATE previews SET effect = '[1]' WHERE id = ?", "shown"),
    ("expiry past the calendar", "UPDATE previews SET expires = 1e300 WHERE id = ?", "shown"),
    ("expiry infinite", "UPDATE previews SET expires = 9e999 WHERE id = ?", "shown"),
    ("expiry not a number", "UPDATE previews SET expires = 'soon' WHERE id = ?", "skipped"),
    ("created before the calendar", "UPDATE previews SET created = -1e20 WHERE id = ?", "shown"),
]


@pytest.mark.parametrize(("case", "sql", "outcome"), DAMAGES, ids=[d[0] for d in DAMAGES])
def test_one_row_that_does_not_read_back_hides_only_itself(
    world: World, case: str, sql: str, outcome: str
) -> None:
    good, bad = (anyio.run(lambda n=n: world.prepare(n, approvals=ASK)) for n in ("inv_3", "inv_4"))
    world.sql(sql, (bad.id,))
    client = browser(own_page(world))
    shown = client.get("/")
    assert shown.status_code == 200, shown.text
    assert f'data-preview="{good.id}"' in shown.text
    if outcome == "skipped":
        assert f'data-preview="{bad.id}"' not in shown.text
        skipped = re.search(r'<p class="error" id="skipped">([^<]*)</p>', shown.text)
        assert skipped is not None, shown.text
        assert bad.id in skipped.group(1)
        assert skipped.group(1).startswith("1 record(s) of the ledger do not read back")
    else:
        assert f'data-preview="{bad.id}"' in shown.text
        assert 'id="skipped"' not in shown.text
    form = {"csrf": csrf(client), "preview_id": good.id, "fingerprint": good.fingerprint}
    assert client.post("approve", data=form).status_code == 303
    assert world.system.effects() == 1  # the good one is still decidable


def test_a_batch_with_an_item_that_does_not_read_back_is_named_not_hidden(
    world: World,
) -> None:
    batch, items = batch_of(world, "inv_5", "inv_6")
    approved = anyio.run(lambda: world.prepare("inv_7", approvals=ASK))
    world.writes.approve(approved.id, approver="bob", fingerprint=approved.fingerprint)
    world.sql("UPDATE previews SET effect = '{' WHERE id IN (?, ?)", (items[0].id, approved.id))
    shown = browser(own_page(world)).get("/")
    assert shown.status_code == 200, shown.text
    skipped = re.search(r'<p class="error" id="skipped">([^<]*)</p>', shown.text)
    assert skipped is not None, shown.text
    for named in (batch.id, approved.id):
        assert named in skipped.group(1)


TIMES: list[tuple[float, str]] = [
    (0.0, "1970-01-01 00:00:00 UTC"),
    (253402300799.0, "9999-12-31 23:59:59 UTC"),
    (253402300800.0, "after 9999-12-31 23:59:59 UTC"),
    (1e300, "after 9999-12-31 23:59:59 UTC"),
    (float("inf"), "after 9999-12-31 23:59:59 UTC"),
    (-1e20, "before 0001-01-01 00:00:00 UTC"),
    (float("-inf"), "before 0001-01-01 00:00:00 UTC"),
    (float("nan"), "nan (not a time)"),
]


@pytest.mark.parametrize(("ts", "text"), TIMES)
def test_a_time_is_printed_whatever_it_is(ts: float, text: str) -> None:
    from airlock.cli._utc import utc_time

    assert utc_time(ts, zone=True) == text
    assert utc_time(ts) == text.removesuffix(" UTC")


def test_each_waiting_item_of_a_batch_has_its_own_approve_and_deny(world: World) -> None:
    batch, items = batch_of(world, "inv_5", "inv_6")
    world.writes.deny(items[1].id, approver="bob", reason="not this one")
    p = own_page(world)
    client = browser(p)
    shown = card(client.get("/").text, "batch", batch.id)
    first = shown[
        shown.index(f'data-item="{items[0].id}"') : shown.index(f'data-item="{items[1].id}"')
    ]
    decided = shown[shown.index(f'data-item="{items[1].id}"') :]
    approve = (
        f'<form method="post" action="{p.base}approve">',
        f'<input type="hidden" name="preview_id" value="{items[0].id}">',
        f'<input type="hidden" name="fingerprint" value="{items[0].fingerprint}">',
    )
    for fact in approve:
        assert fact in first, fact
    assert f'action="{p.base}deny"' in first
    assert 'class="approve-item"' in first  # not the batch's button.approve
    assert f'action="{p.base}approve"' not in decided  # denied: nothing more to decide
    assert f'action="{p.base}deny"' not in decided
    form = {"csrf": csrf(client), "preview_id": items[0].id, "fingerprint": items[0].fingerprint}
    assert client.post("approve", data=form).status_code == 303
    assert said(client)[0][0] == "notice"
    assert world.system.effects() == 1
    stored = world.ledger.preview(items[0].id)
    assert stored is not None
    assert stored.state == "committed"


@pytest.mark.parametrize("commits", [False, True])
def test_approving_a_batch_whose_items_all_expired_is_an_error(
    tmp_path: Path, commits: bool
) -> None:
    # Prepared long ago, so past their expiry now; the page (its clock then) still shows them.
    world = World(tmp_path, clock=Clock(time.time() - 2000))
    try:
        batch, items = batch_of(world, "inv_5", "inv_6")
        client = browser(own_page(world, commits=commits))
        assert batch.id in client.get("/").text
        form = {"csrf": csrf(client), "batch_id": batch.id, "fingerprint": batch.fingerprint}
        assert client.post("approve-batch", data=form).status_code == 303
        [(kind, text)] = said(client)
        assert kind == "error", text
        assert text.startswith(f"nothing of batch {batch.id} was approved"), text
        assert world.system.sends() == 0
        for item in items:
            assert world.ledger.approval(item.id) is None
    finally:
        world.close()


def test_html_escapes_the_skipped_line() -> None:
    from airlock.cli._approval_html import PageView, render_page

    view = PageView(
        base="/b/", approver="carol", ledger="l.db", commits=False, csrf="c", waiting=[],
        approved=[], receipts=[], batches=[], self_approval=False, now=0.0,
        skipped=["<pv_x>"],
    )  # fmt: skip
    rendered = render_page(view)
    assert html.escape("<pv_x>") in rendered
    assert "<pv_x>" not in rendered
