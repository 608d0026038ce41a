"""The approval page without a browser: who gets in, forged and stale posts, the approver
that configuration names (never a form field), and approve, deny and commit through it."""

from __future__ import annotations

import html
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from airlock.cli import app
from airlock.cli._approval_page import COOKIE, SESSION_TTL, ApprovalPage
from airlock.cli._approver import Approver
from airlock.tools import Batch, Preview
from tests.airlock.cli import commit_policy
from tests.airlock.cli.hostile_text import INVISIBLE, INVISIBLE_IDS, hidden
from tests.ports import free_port
from tests.tools.test_write_world import ASK, Clock, World

TOKEN = "t0ken-" + "x" * 20
BASE = "http://127.0.0.1"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, clock=Clock())
    yield w
    w.close()


@pytest.fixture
def waiting(world: World) -> Preview:
    return anyio.run(lambda: world.prepare("inv_3", approvals=ASK))


def page(world: World, *, name: str = "carol", commits: bool = True, **kw: Any) -> ApprovalPage:
    writes, rules = (world.writes, commit_policy.policy()) if commits else (None, None)
    approver = Approver(name, world.ledger, writes=writes, policy=rules, **kw)
    return ApprovalPage(approver, ledger="ledger.db", token=TOKEN, clock=world.clock)


def browser(p: ApprovalPage) -> TestClient:
    """A client that opened the printed link: it holds the session cookie."""
    client = TestClient(p.app(), base_url=BASE + p.base, follow_redirects=False)
    opened = client.get("/", params={"token": TOKEN})
    assert opened.status_code == 303
    assert COOKIE in opened.cookies
    client.headers["origin"] = BASE  # as a browser posts the page's own forms
    return client


def csrf(client: TestClient) -> str:
    shown = client.get("/")
    assert shown.status_code == 200, shown.text
    found = re.search(r'name="csrf" value="([^"]+)"', shown.text)
    assert found is not None
    return found.group(1)


def card(shown: str, kind: str, ident: str) -> str:
    """The HTML of one card (``preview`` or ``batch``) of the page."""
    start = shown.index(f'data-{kind}="{ident}"')
    ends = [shown.find(mark, start) for mark in ('<div class="card', "<h2>")]
    return shown[start : min(end for end in ends if end >= 0)]


def test_the_page_shows_what_a_person_decides_on(world: World, waiting: Preview) -> None:
    shown = browser(page(world)).get("/")
    assert shown.status_code == 200
    for fact in (
        waiting.id,
        waiting.fingerprint,
        "refund 10.03 USD on inv_3",
        "alice@acme",
        "<th>amounts (minor units)</th><td>1003 USD</td>",
        "refunds-ask",
        "&quot;recipient&quot;: &quot;cus_3&quot;",
        "carol",
    ):
        assert fact in shown.text, fact
    assert shown.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in shown.headers["content-security-policy"]


@pytest.mark.parametrize(
    ("token", "status"), [(None, 401), ("wrong", 401), (TOKEN[:-1], 401), ("", 401)]
)
def test_without_the_link_nobody_gets_in(
    world: World, waiting: Preview, token: str | None, status: int
) -> None:
    p = page(world)
    client = TestClient(p.app(), base_url=BASE + p.base, follow_redirects=False)
    shown = client.get("/", params={} if token is None else {"token": token})
    assert shown.status_code == status
    assert waiting.id not in shown.text
    client.cookies.set(COOKIE, "made-up")
    assert client.get("/").status_code == 401


def test_another_host_is_refused(world: World, waiting: Preview) -> None:
    p = page(world)
    client = TestClient(p.app(), base_url="http://evil.example" + p.base, follow_redirects=False)
    assert client.get("/", params={"token": TOKEN}).status_code == 400


FORGERIES: list[tuple[str, dict[str, str], dict[str, str], int]] = [
    ("no csrf", {}, {}, 403),
    ("made-up csrf", {"csrf": "x" * 43}, {}, 403),
    ("another origin", {}, {"origin": "http://evil.example"}, 403),
    ("not a form", {}, {"content-type": "application/json"}, 415),
    ("no session", {}, {"cookie": f"{COOKIE}=made-up"}, 401),
    ("more fields than a form has", {f"f{n}": "x" for n in range(10)}, {}, 413),
    ("a form larger than any of the page's", {"note": "x" * 20_000}, {}, 413),
]
ROUTES = ["approve", "deny", "approve-batch", "deny-batch"]


def batch_of(world: World, *invoices: str) -> tuple[Batch, list[Preview]]:
    items = [anyio.run(lambda n=n: world.prepare(n, approvals=ASK)) for n in invoices]
    return world.writes.store_batch(items), items


def form_of(route: str, preview: Preview, batch: Batch) -> dict[str, str]:
    """The fields of the page's own form for ``route`` (the CSRF token aside)."""
    return {
        "approve": {"preview_id": preview.id, "fingerprint": preview.fingerprint},
        "deny": {"preview_id": preview.id, "reason": "wrong customer"},
        "approve-batch": {"batch_id": batch.id, "fingerprint": batch.fingerprint},
        "deny-batch": {"batch_id": batch.id, "reason": "wrong customers"},
    }[route]


@pytest.mark.parametrize("route", ROUTES)
def test_each_form_of_the_page_is_accepted_as_the_page_posts_it(
    world: World, waiting: Preview, route: str
) -> None:
    batch, items = batch_of(world, "inv_5", "inv_6")
    client = browser(page(world))
    posted = client.post(route, data={"csrf": csrf(client), **form_of(route, waiting, batch)})
    assert posted.status_code == 303, posted.text
    decided = [waiting] if route in ("approve", "deny") else items
    for preview in decided:
        stored = world.ledger.preview(preview.id)
        assert stored is not None
        assert stored.state == ("denied" if route.startswith("deny") else "committed")


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(("case", "fields", "headers", "status"), FORGERIES)
def test_forged_posts_change_nothing(
    world: World,
    waiting: Preview,
    route: str,
    case: str,
    fields: dict[str, str],
    headers: dict[str, str],
    status: int,
) -> None:
    batch, items = batch_of(world, "inv_5", "inv_6")
    client = browser(page(world))
    form = {"csrf": csrf(client), **form_of(route, waiting, batch), **fields}
    if case == "no csrf":
        del form["csrf"]
    if headers.get("content-type") == "application/json":
        posted = client.post(route, json=form, headers=headers)
    else:
        if "cookie" in headers:
            client.cookies.clear()
        posted = client.post(route, data=form, headers=headers)
    assert posted.status_code == status, (case, posted.text)
    for preview in (waiting, *items):
        stored = world.ledger.preview(preview.id)
        assert stored is not None
        assert stored.state == "prepared"
    assert world.system.sends() == 0


ORIGINS: list[tuple[str, dict[str, str], int]] = [
    ("the page's own origin", {"origin": BASE}, 303),
    ("no origin, from the page by its fetch metadata", {"sec-fetch-site": "same-origin"}, 303),
    ("no origin and no fetch metadata", {}, 403),
    ("no origin, from another site", {"sec-fetch-site": "cross-site"}, 403),
    ("no origin, from another port of the host", {"sec-fetch-site": "same-site"}, 403),
    ("the page's origin, but fetched from another site", {"origin": BASE, "sec-fetch-site": "cross-site"}, 403),
    ("an opaque origin", {"origin": "null"}, 403),
    ("another port of the host", {"origin": BASE + ":9"}, 403),
    ("another name of the host", {"origin": "http://localhost"}, 403),
]  # fmt: skip


@pytest.mark.parametrize(("case", "headers", "status"), ORIGINS)
def test_a_post_must_come_from_the_page_itself(
    world: World, waiting: Preview, case: str, headers: dict[str, str], status: int
) -> None:
    client = browser(page(world, commits=False))
    form = {"csrf": csrf(client), "preview_id": waiting.id, "fingerprint": waiting.fingerprint}
    del client.headers["origin"]
    posted = client.post("approve", data=form, headers=headers)
    assert posted.status_code == status, (case, posted.text)
    assert (world.ledger.approval(waiting.id) is not None) == (status == 303)


def test_the_session_cookie_goes_only_to_this_page_and_ends(world: World) -> None:
    p, other = page(world), page(world)
    client = TestClient(p.app(), base_url=BASE + p.base, follow_redirects=False)
    opened = client.get("/", params={"token": TOKEN})
    assert opened.headers["location"] == p.base
    _, *parts = (part.strip() for part in opened.headers["set-cookie"].split(";"))
    attributes = {k.lower(): v for k, _, v in (part.partition("=") for part in parts)}
    # Cookies are not kept apart by port: a path no other local service knows is.
    assert attributes["path"] == p.base
    assert p.base != other.base
    assert re.fullmatch(r"/[\w-]{22,}/", p.base)
    assert int(attributes["max-age"]) == SESSION_TTL
    assert "httponly" in attributes
    assert attributes["samesite"].lower() == "strict"


@pytest.mark.parametrize(
    ("after", "status"), [(0, 200), (SESSION_TTL - 1, 200), (SESSION_TTL + 1, 401)]
)
def test_a_session_ends_after_its_lifetime(
    world: World, waiting: Preview, after: float, status: int
) -> None:
    p = page(world)
    client = browser(p)
    world.clock.advance(after)
    shown = client.get("/")
    assert shown.status_code == status
    assert browser(p).get("/").status_code == 200  # the link opens a new one


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/"), ("GET", "/?token=" + TOKEN), ("POST", "/approve"), ("POST", "/deny")],
)
def test_nothing_is_served_outside_the_pages_path(
    world: World, waiting: Preview, method: str, path: str
) -> None:
    p = page(world)
    session = browser(p).cookies[COOKIE]
    outside = TestClient(p.app(), base_url=BASE, follow_redirects=False)
    answered = outside.request(method, path, headers={"cookie": f"{COOKIE}={session}"})
    assert answered.status_code == 404
    assert p.base.strip("/") not in answered.text
    assert waiting.id not in answered.text


def test_a_batch_card_shows_what_each_item_would_send(world: World) -> None:
    batch, items = batch_of(world, "inv_5", "inv_6")
    p = page(world)
    shown = card(browser(p).get("/").text, "batch", batch.id)
    for n, item in zip((5, 6), items, strict=True):
        for fact in (
            item.fingerprint,
            f"write(billing:refund/inv_{n})",
            f"<th>amounts (minor units)</th><td>{1000 + n} USD</td>",
            f"&quot;amount_minor&quot;: {1000 + n}",
            f"&quot;recipient&quot;: &quot;cus_{n}&quot;",
            f'<form method="post" action="{p.base}deny">',
            f'<input type="hidden" name="preview_id" value="{item.id}">',
        ):
            assert fact in shown, fact
    assert f'<form method="post" action="{p.base}deny-batch">' in shown


def test_a_batch_total_counts_only_the_items_still_waiting(world: World) -> None:
    batch, items = batch_of(world, "inv_5", "inv_6")
    world.writes.deny(items[0].id, approver="bob", reason="not this one")
    shown = card(browser(page(world)).get("/").text, "batch", batch.id)
    assert "spend still waiting, in minor units: <span class=total>1006 USD</span>" in shown


@pytest.mark.parametrize(
    ("name", "reason", "says", "states"),
    [
        ("carol", "wrong customers", "denied 2 waiting item(s) of batch PB", ("denied",) * 2),
        ("carol", " ", "give a reason", ("prepared",) * 2),
        ("policy:auto", "x", "invalid_input: ", ("prepared",) * 2),
    ],
)
def test_denying_a_batch_denies_every_item_still_waiting(
    world: World, name: str, reason: str, says: str, states: tuple[str, ...]
) -> None:
    batch, items = batch_of(world, "inv_5", "inv_6", "inv_7")
    world.writes.approve(items[2].id, approver="bob", fingerprint=items[2].fingerprint)
    client = browser(page(world, name=name, commits=False))
    form = {"csrf": csrf(client), "batch_id": batch.id, "reason": reason}
    assert client.post("deny-batch", data=form).status_code == 303
    assert says.replace("PB", batch.id) in client.get("/").text
    stored = [world.ledger.preview(item.id) for item in items]
    assert tuple(p.state for p in stored if p is not None) == (*states, "approved")
    assert world.system.sends() == 0


def test_a_large_form_is_refused_before_it_is_read_whole(world: World, waiting: Preview) -> None:
    p = page(world)
    client = browser(p)
    token, session = csrf(client), client.cookies[COOKIE]
    chunks = [f"csrf={token}&preview_id={waiting.id}&note=".encode()]
    chunks += [b"x" * (1 << 20)] * 256  # 256 MiB, were it all read
    read: list[int] = []
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        read.append(len(read))
        last = len(read) == len(chunks)
        return {"type": "http.request", "body": chunks[len(read) - 1], "more_body": not last}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [
        (b"host", b"127.0.0.1"),
        (b"origin", BASE.encode()),
        (b"cookie", f"{COOKIE}={session}".encode()),
        (b"content-type", b"application/x-www-form-urlencoded"),
    ]
    scope = {"type": "http", "method": "POST", "path": p.base + "approve", "headers": headers,
             "query_string": b"", "http_version": "1.1", "scheme": "http", "root_path": "",
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}  # fmt: skip
    anyio.run(p.app(), scope, receive, send)
    assert sent[0]["status"] == 413
    assert len(read) < 4
    assert world.ledger.approval(waiting.id) is None


@pytest.mark.parametrize(("case", "text", "shown"), INVISIBLE, ids=INVISIBLE_IDS)
def test_a_summary_shows_what_would_hide_or_reorder_it(
    world: World, case: str, text: str, shown: str
) -> None:
    alone, *items = [
        anyio.run(lambda n=n: world.prepare(f"inv_{n}", approvals=ASK)) for n in (7, 8, 9)
    ]
    for preview in (alone, items[1]):  # as a tool whose summary quotes the model stores it
        world.sql("UPDATE previews SET summary = ? WHERE id = ?", (f"note: {text}", preview.id))
    world.writes.store_batch(items)
    shown_page = browser(page(world)).get("/").text
    assert f"<th>summary</th><td>note: {html.escape(shown)}</td>" in shown_page
    assert f"<td>note: {html.escape(shown)}</td><td>waiting</td>" in shown_page  # the batch's
    assert not hidden(shown_page.replace("\n", ""))


def test_a_form_of_another_session_or_a_stale_one_is_refused(
    world: World, waiting: Preview
) -> None:
    p = page(world)
    mine, theirs = browser(p), browser(p)
    form = {"csrf": csrf(theirs), "preview_id": waiting.id, "fingerprint": waiting.fingerprint}
    assert mine.post("/approve", data=form).status_code == 403
    stale = {**form, "csrf": csrf(mine)}
    world.clock.advance(901)
    assert mine.post("/approve", data=stale).status_code == 403
    assert world.ledger.approval(waiting.id) is None


def test_the_approver_comes_from_configuration_not_the_form(world: World, waiting: Preview) -> None:
    client = browser(page(world, commits=False))
    form = {
        "csrf": csrf(client),
        "preview_id": waiting.id,
        "fingerprint": waiting.fingerprint,
        "approver": "mallory",
        "as": "mallory",
    }
    posted = client.post("/approve", data=form)
    assert posted.status_code == 303
    approval = world.ledger.approval(waiting.id)
    assert approval is not None
    assert approval.approver == "carol"
    shown = client.get("/").text
    assert f"approved {waiting.id} as carol; the session that asked commits it" in shown
    assert world.system.sends() == 0  # the harness that asked commits it


def test_approving_commits_once_and_shows_the_receipt(world: World, waiting: Preview) -> None:
    client = browser(page(world))
    form = {"csrf": csrf(client), "preview_id": waiting.id, "fingerprint": waiting.fingerprint}
    assert client.post("/approve", data=form).status_code == 303
    shown = client.get("/").text
    assert "committed once, receipt" in shown
    assert f'class="receipt" data-preview="{waiting.id}"' in shown
    assert world.system.effects() == 1
    again = client.post("/approve", data=form)  # the page's token stays valid a while
    assert again.status_code == 303
    assert "conflict: " in client.get("/").text
    assert world.system.effects() == 1


@pytest.mark.parametrize(
    ("name", "fingerprint", "says"),
    [
        ("alice", "FP", "denied: &#x27;alice&#x27; asked for preview"),
        ("alice@acme", "FP", "set self_approval = true in the policy"),
        ("carol", "0" * 64, "approval_mismatch: "),
        ("policy:auto", "FP", "invalid_input: "),
    ],
)
def test_refused_approvals_say_why_on_the_page(
    world: World, waiting: Preview, name: str, fingerprint: str, says: str
) -> None:
    client = browser(page(world, name=name))
    fp = waiting.fingerprint if fingerprint == "FP" else fingerprint
    form = {"csrf": csrf(client), "preview_id": waiting.id, "fingerprint": fp}
    assert client.post("/approve", data=form).status_code == 303
    assert says in client.get("/").text
    assert world.ledger.approval(waiting.id) is None
    assert world.system.sends() == 0


def test_self_approval_when_the_policy_allows_it(world: World, waiting: Preview) -> None:
    client = browser(page(world, name="alice", self_approval=True))
    shown = client.get("/").text
    assert "another person must approve" not in shown
    form = {"csrf": csrf(client), "preview_id": waiting.id, "fingerprint": waiting.fingerprint}
    client.post("/approve", data=form)
    assert world.system.effects() == 1


def test_deny_needs_a_reason_and_blocks_the_commit(world: World, waiting: Preview) -> None:
    client = browser(page(world))
    form = {"csrf": csrf(client), "preview_id": waiting.id, "reason": " "}
    client.post("/deny", data=form)
    assert "give a reason" in client.get("/").text
    client.post("/deny", data={**form, "csrf": csrf(client), "reason": "wrong customer"})
    stored = world.ledger.preview(waiting.id)
    assert stored is not None
    assert stored.state == "denied"
    assert waiting.id not in re.sub(r"denied pv_\w+", "", client.get("/").text)


def test_without_a_token_the_page_warns(world: World, waiting: Preview) -> None:
    approver = Approver("carol", world.ledger)
    p = ApprovalPage(approver, ledger="ledger.db", token=None, clock=world.clock)
    shown = TestClient(p.app(), base_url=BASE + p.base).get("/")
    assert shown.status_code == 200
    assert "anyone who can reach this port on this machine can approve writes as carol" in (
        shown.text
    )
    assert waiting.id in shown.text


@pytest.mark.parametrize("no_token", [False, True])
def test_approvals_serve_prints_the_link_and_serves_the_page(
    world: World, waiting: Preview, no_token: bool
) -> None:
    port = free_port()
    command = [
        str(Path(sys.executable).parent / "airlock"),
        "approvals",
        "serve",
        "--port",
        str(port),
        "--as",
        "carol",
        "--ledger",
        str(world.root / "ledger.db"),
    ] + (["--no-token"] if no_token else [])
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        link = server.stdout.readline().strip().removeprefix("approvals page: ")
        assert link.startswith(f"http://127.0.0.1:{port}/")
        home = link.partition("?")[0]
        deadline = time.monotonic() + 20
        while True:
            try:
                opened = httpx.get(link, follow_redirects=False)
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "the page did not start"
                time.sleep(0.05)
        if no_token:
            assert opened.status_code == 200
            assert "anyone who can reach this port" in opened.text
        else:
            assert opened.status_code == 303
            assert httpx.get(home).status_code == 401
            opened = httpx.get(home, cookies=opened.cookies)
        assert opened.status_code == 200
        assert waiting.id in opened.text
        assert waiting.fingerprint in opened.text
    finally:
        server.terminate()
        _, err = server.communicate(timeout=20)
    assert ("no token: anyone who can reach this port" in err) == no_token


def test_approvals_serve_refuses_an_empty_approver(world: World) -> None:
    result = CliRunner().invoke(
        app, ["approvals", "serve", "--as", "", "--ledger", str(world.root / "ledger.db")]
    )
    assert result.exit_code == 1
    assert result.output.strip() == "invalid_input: --as '' names nobody; give the approver's id"


@pytest.mark.parametrize(
    ("name", "self_approval", "says", "sends"),
    [
        ("carol", False, "approved batch PB as carol: 2 committed", 2),
        (
            "alice",
            False,
            "denied: &#x27;alice&#x27; proposed batch &#x27;PB&#x27; and cannot approve it",
            0,
        ),
        ("alice", True, "approved batch PB as alice: 2 committed", 2),
    ],
)
def test_a_batch_is_approved_with_its_one_fingerprint(
    world: World, name: str, self_approval: bool, says: str, sends: int
) -> None:
    items = [anyio.run(lambda n=n: world.prepare(f"inv_{n}", approvals=ASK)) for n in (5, 6)]
    batch = world.writes.store_batch(items)
    client = browser(page(world, name=name, self_approval=self_approval))
    shown = client.get("/").text
    assert batch.fingerprint in shown
    assert all(item.id in shown for item in items)
    form = {"csrf": csrf(client), "batch_id": batch.id, "fingerprint": batch.fingerprint}
    assert client.post("/approve-batch", data=form).status_code == 303
    assert says.replace("PB", batch.id) in client.get("/").text
    assert world.system.effects() == sends


def test_a_policy_file_with_a_malformed_self_approval_is_a_usage_error(
    world: World, waiting: Preview
) -> None:
    policy = world.root / "policy.toml"
    policy.write_text('version = 1\nself_approval = "yes"\n')
    result = CliRunner().invoke(
        app,
        [
            "approvals",
            "approve",
            waiting.id,
            "--fingerprint",
            waiting.fingerprint,
            "--as",
            "alice",
            "--policy",
            str(policy),
            "--ledger",
            str(world.root / "ledger.db"),
        ],
    )
    assert result.exit_code == 2
    assert "error (policy_file)" in result.output
    assert "self_approval" in result.output
    assert world.ledger.approval(waiting.id) is None


# Cookies are not kept apart by port: another service on 127.0.0.1 may set a cookie of the
# page's name for Path=/, and the browser sends it after the page's own (RFC 6265 5.4).
SHADOWS = [
    ("another after the session", "{s}; {c}=junk", 200),
    ("another before the session", "{c}=junk; {s}", 200),
    ("an empty one after the session", "{s}; {c}=", 200),
    ("only another", "{c}=junk", 401),
    ("only an empty one", "{c}=", 401),
]


@pytest.mark.parametrize(("case", "header", "status"), SHADOWS, ids=[s[0] for s in SHADOWS])
def test_a_cookie_of_the_same_name_from_elsewhere_does_not_shadow_the_session(
    world: World, case: str, header: str, status: int
) -> None:
    p = page(world)
    client = TestClient(p.app(), base_url=BASE + p.base, follow_redirects=False)
    session = client.get("/", params={"token": TOKEN}).cookies[COOKIE]
    client.cookies.clear()
    cookie = header.format(s=f"{COOKIE}={session}", c=COOKIE)
    assert client.get("/", headers={"cookie": cookie}).status_code == status


def test_a_batch_left_to_its_session_says_the_session_commits_it(tmp_path: Path) -> None:
    from tests.airlock.cli import test_approver as sealed

    harness = sealed.WritePath(sealed.registry(), sealed.SQLiteLedgerStore(tmp_path / "l.db"))
    batch_id, fingerprint = sealed._batch(harness)
    approver = sealed._approver(harness)  # another process, with --registry: no secrets
    client = browser(ApprovalPage(approver, ledger="l.db", token=TOKEN))
    form = {"csrf": csrf(client), "batch_id": batch_id, "fingerprint": fingerprint}
    assert client.post("/approve-batch", data=form).status_code == 303
    said = f"approved batch {batch_id} as bob: 1 approved; the session that asked commits it"
    assert said in client.get("/").text
    assert harness.ledger.preview(harness.ledger.batch(batch_id).items[0]).state == "approved"  # type: ignore[union-attr]
