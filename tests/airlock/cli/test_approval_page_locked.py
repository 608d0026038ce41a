"""The approval page while another process holds the ledger locked: a post waits for the
ledger (up to AIRLOCK_BUSY_TIMEOUT) on a worker thread, and the server keeps answering the
rest meanwhile: its event loop is never the one that waits."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from airlock.cli._approval_ledger import open_approval_ledger
from airlock.cli._approval_page import COOKIE, ApprovalPage
from airlock.cli._approver import Approver
from airlock.tools import LedgerStore, Preview
from tests.airlock.cli.test_approval_page import page
from tests.airlock.cli.test_approval_server import TOKEN, serving
from tests.tools.test_write_world import ASK, World

BUSY = 3.0
"""AIRLOCK_BUSY_TIMEOUT in these tests: how long a locked post waits for the ledger."""
QUICK = 1.0
"""What another request may take meanwhile: well under BUSY."""


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.close()


@pytest.fixture
def ledger(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[LedgerStore]:
    """The ledger as `airlock approvals serve` opens it, with a short busy timeout."""
    monkeypatch.setenv("AIRLOCK_BUSY_TIMEOUT", str(BUSY))
    store = open_approval_ledger(world.root / "ledger.db", readonly=False)
    yield store
    store.close()


def _locked(world: World) -> sqlite3.Connection:
    """Another process's connection, holding the ledger's write lock until rolled back."""
    other = sqlite3.connect(world.root / "ledger.db", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    return other


def _timed(request: Callable[[], httpx.Response]) -> tuple[int, float]:
    started = time.monotonic()
    status = request().status_code
    return status, time.monotonic() - started


@pytest.mark.parametrize("route", ["deny", "approve"])
def test_a_post_waiting_for_a_locked_ledger_does_not_hold_up_other_requests(
    world: World, ledger: LedgerStore, route: str
) -> None:
    waiting: Preview = anyio.run(lambda: world.prepare("inv_3", approvals=ASK))
    page = ApprovalPage(Approver("carol", ledger), ledger="ledger.db", token=TOKEN)
    with serving(page, head_timeout=30.0) as port:
        opened = httpx.get(page.link(port), follow_redirects=False)
        assert opened.status_code == 303
        client = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            cookies={COOKIE: opened.cookies[COOKIE]},
            headers={"origin": f"http://127.0.0.1:{port}"},
            timeout=30.0,
        )
        shown = client.get(page.base).text
        csrf = shown.split('name="csrf" value="')[1].split('"')[0]
        fields = {"csrf": csrf, "preview_id": waiting.id, "reason": "no"}
        fields["fingerprint"] = waiting.fingerprint
        person: dict[str, tuple[int, float]] = {}
        other = _locked(world)
        try:
            post = threading.Thread(
                target=lambda: person.update(
                    answer=_timed(lambda: client.post(page.base + route, data=fields))
                )
            )
            post.start()
            time.sleep(0.5)  # the post is waiting for the ledger now
            status, took = _timed(lambda: client.get("/elsewhere"))
            post.join(30)
        finally:
            other.rollback()
            other.close()
        client.close()
    assert status == 404
    assert took < QUICK, f"a request that needs no ledger waited {took:.2f} s"
    assert person["answer"][0] == 303  # the post waited its busy timeout, then said so
    assert person["answer"][1] >= BUSY - 0.5
    assert world.ledger.approval(waiting.id) is None


def test_approvals_posted_at_once_commit_once(world: World) -> None:
    # Each post approves and commits on worker threads of its own, side by side: the ledger's
    # compare-and-set lets one of them send, and the other gets its receipt or "in flight".
    waiting: Preview = anyio.run(lambda: world.prepare("inv_3", approvals=ASK))
    p = page(world)
    with serving(p, head_timeout=30.0) as port:
        opened = httpx.get(p.link(port), follow_redirects=False)
        client = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            cookies={COOKIE: opened.cookies[COOKIE]},
            headers={"origin": f"http://127.0.0.1:{port}"},
            timeout=30.0,
        )
        csrf = client.get(p.base).text.split('name="csrf" value="')[1].split('"')[0]
        fields = {"csrf": csrf, "preview_id": waiting.id, "fingerprint": waiting.fingerprint}
        answers: list[int] = []
        posts = [
            threading.Thread(
                target=lambda: answers.append(
                    client.post(p.base + "approve", data=fields).status_code
                )
            )
            for _ in range(4)
        ]
        for post in posts:
            post.start()
        for post in posts:
            post.join(30)
        client.close()
    assert answers == [303] * 4
    assert world.system.effects() == 1
    committed = world.ledger.preview(waiting.id)
    assert committed is not None
    assert committed.state == "committed"
