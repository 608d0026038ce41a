"""The new forms of what a tool reaches, through the registry: ``network({url})``, list
placeholders, registration of their fields, and a read that a person approves once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from airlock.policies import (
    ApprovalPolicy,
    ApprovalRule,
    Grant,
    Principal,
    UsageError,
    disclose,
    network,
    read,
    write,
)
from airlock.tools import (
    CallContext,
    ConflictError,
    DeniedError,
    InvalidInputError,
    MemoryAuditStore,
    NeedsApprovalError,
    Preview,
    Registry,
    RunAuthority,
    Secret,
    SQLiteLedgerStore,
    ToolError,
    WritePath,
    write_tool,
)
from airlock.tools._audit_log import AuditLog

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"web.read", "mail.send"}))
GRANT = Grant(
    scopes=frozenset({"web.read", "mail.send"}),
    effects=(
        read("web:page/*"),
        network("https://docs.example.com/**"),
        network("*.python.org"),
        network("https://evil.example/**"),
        write("mail:outbox/*"),
        disclose("email:*@acme.com"),
    ),
)
DOCS_ONLY = ApprovalPolicy(
    (
        ApprovalRule(
            id="docs",
            action="allow",
            effect="network",
            targets=("https://docs.example.com/**", "*.python.org"),
        ),
        ApprovalRule(id="other-hosts", action="ask", effect="network"),
    )
)
Url = Annotated[str, Field(max_length=2048, description="The page's URL.")]


class Page(BaseModel):
    url: str
    text: str


class Fetched:
    """What the fetch handler was asked for, in order."""

    def __init__(self) -> None:
        self.urls: list[str] = []
        self.tokens: list[str] = []


def web_registry(fetched: Fetched, audit: AuditLog | None = None) -> Registry:
    registry = Registry(audit=audit)

    @registry.tool(
        effects=[read("web:page/*"), network("{url}")],
        scope="web.read",
        callers={"direct", "code"},
    )
    def web_page_fetch(
        url: Url,
        token: Annotated[str | None, Secret(), Field(max_length=64)] = None,
    ) -> Page:
        """Fetch one web page by URL and return its text. Use it to read documentation.
        It does not run scripts or follow links."""
        if url.endswith("/gone"):
            raise ConflictError("the page moved")
        fetched.urls.append(url)
        if token is not None:
            fetched.tokens.append(token)
        return Page(url=url, text=f"text of {url}")

    return registry


def ctx(
    approvals: ApprovalPolicy = DOCS_ONLY,
    *,
    caller: str = "direct",
    run_id: str = "run_1",
    grant: Grant = GRANT,
) -> CallContext:
    authority = RunAuthority(principal=ALICE, grant=grant, run_id=run_id, approvals=approvals)
    return authority.context(caller, f"{run_id}:c1")  # type: ignore[arg-type]


class World:
    def __init__(self, root: Path) -> None:
        self.fetched = Fetched()
        self.store = MemoryAuditStore()
        self.registry = web_registry(self.fetched, AuditLog(self.store))
        self.root = root
        self.ledger = SQLiteLedgerStore(root / "ledger.db", synchronous="NORMAL")
        self.writes = WritePath(self.registry, self.ledger)

    def events(self) -> list[Any]:
        return self.registry.audit.events()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.ledger.close()


# -- network({url}) through admission -------------------------------------------------------

# (url, the answer's code (None: the read ran), the field or reason it names)
FETCHES = [
    ("https://docs.example.com/guide", None, ""),
    ("https://www.python.org/doc/", None, ""),
    ("https://docs.example.com.evil.example/", "denied", "effect"),  # outside the grant
    ("https://docs.example.com:8443/guide", "denied", "effect"),
    ("http://docs.example.com/guide", "denied", "effect"),
    ("https://evil.example/steal?data=x", "needs_approval", ""),  # granted, but asked
    ("https://docs.example.com@evil.example/", "invalid_input", "url"),
    ("https://docs.example.com/a/../../admin", "invalid_input", "url"),
    ("file:///etc/passwd", "invalid_input", "url"),
]


@pytest.mark.parametrize(("url", "code", "about"), FETCHES)
async def test_a_url_is_judged_by_the_grant_and_the_rules(
    url: str, code: str | None, about: str
) -> None:
    fetched = Fetched()
    registry = web_registry(fetched)
    call = registry.call("web_page_fetch", {"url": url}, ctx(caller="code"))
    if code is None:
        assert (await call)["url"] == url
        assert fetched.urls == [url]
        return
    with pytest.raises(ToolError) as info:
        await call
    assert info.value.code == code
    assert fetched.urls == []  # refused before the handler
    if isinstance(info.value, InvalidInputError):
        assert [i.field for i in info.value.issues] == [about]
    if isinstance(info.value, DeniedError):
        assert info.value.reason == about


async def test_a_read_a_program_cannot_wait_for_says_to_call_it_directly() -> None:
    registry = web_registry(Fetched())
    with pytest.raises(NeedsApprovalError) as info:
        await registry.call("web_page_fetch", {"url": "https://evil.example/"}, ctx(caller="code"))
    assert "call it directly" in info.value.message
    assert info.value.preview_id is None


async def test_a_direct_read_to_approve_without_a_ledger_is_denied() -> None:
    registry = web_registry(Fetched())
    with pytest.raises(DeniedError) as info:
        await registry.call("web_page_fetch", {"url": "https://evil.example/"}, ctx())
    assert "no approval ledger" in info.value.message


# -- a read a person approves ---------------------------------------------------------------


async def test_an_asked_read_is_previewed_approved_once_and_run_once(world: World) -> None:
    url = "https://evil.example/page"
    preview = await world.writes.call("web_page_fetch", {"url": url}, ctx())
    assert isinstance(preview, Preview)
    assert (preview.state, preview.rule) == ("prepared", "other-hosts")
    assert preview.effect == {"url": url, "token": None}
    assert preview.effects == ("read(web:page/*)", "network(https://evil.example/page)")
    assert world.fetched.urls == []  # nothing ran

    with pytest.raises(NeedsApprovalError):  # not approved yet
        await world.writes.run_read(preview.id, preview.fingerprint, ctx())
    world.writes.approve(preview.id, approver="carol", fingerprint=preview.fingerprint)
    receipt = await world.writes.run_read(preview.id, preview.fingerprint, ctx())
    assert receipt.data == {"url": url, "text": f"text of {url}"}
    assert world.fetched.urls == [url]

    again = await world.writes.run_read(preview.id, preview.fingerprint, ctx())
    assert again.replayed
    assert again.data == receipt.data
    asked = await world.writes.call("web_page_fetch", {"url": url}, ctx())
    assert isinstance(asked, Preview)
    assert (asked.id, asked.state) == (preview.id, "committed")
    assert world.fetched.urls == [url]  # ran once

    events = [e for e in world.events() if e.tool == "web_page_fetch"]
    codes = [(e.final, e.outcome, e.code, e.exercised) for e in events]
    assert codes == [
        (True, "preview", "needs_approval", False),  # the call: a preview
        (False, "ok", None, False),  # carol's approval
        (False, "ok", None, True),  # the approved read ran: its effects happened
        (True, "preview", "already_committed", False),  # asked again: nothing ran
    ]
    assert events[2].approver == "carol"
    assert events[2].effects == preview.effects


async def test_a_read_that_needs_no_approval_runs_through_the_write_path_call(
    world: World,
) -> None:
    result = await world.writes.call("web_page_fetch", {"url": "https://docs.example.com/a"}, ctx())
    assert result == {
        "url": "https://docs.example.com/a",
        "text": "text of https://docs.example.com/a",
    }


async def test_a_failed_approved_read_ends_failed_and_can_be_asked_again(world: World) -> None:
    url = "https://evil.example/gone"
    preview = await world.writes.call("web_page_fetch", {"url": url}, ctx())
    assert isinstance(preview, Preview)
    world.writes.approve(preview.id, approver="carol")
    with pytest.raises(ConflictError):
        await world.writes.run_read(preview.id, preview.fingerprint, ctx())
    stored = world.ledger.preview(preview.id)
    assert stored is not None
    assert stored.state == "failed"
    fresh = await world.writes.call("web_page_fetch", {"url": url}, ctx())
    assert isinstance(fresh, Preview)
    assert fresh.id != preview.id


async def test_the_plain_registry_call_answers_with_the_preview_id(world: World) -> None:
    with pytest.raises(NeedsApprovalError) as info:
        await world.registry.call("web_page_fetch", {"url": "https://evil.example/"}, ctx())
    preview_id = info.value.preview_id
    assert preview_id is not None
    assert world.ledger.preview(preview_id) is not None


async def test_an_asked_reads_secret_argument_is_sealed_and_given_back(world: World) -> None:
    args = {"url": "https://evil.example/private", "token": "tok_live_123456"}
    preview = await world.writes.call("web_page_fetch", args, ctx())
    assert isinstance(preview, Preview)
    assert str(preview.effect["token"]).startswith("secret:")
    assert b"tok_live_123456" not in ledger_bytes(world.root)
    world.writes.approve(preview.id, approver="carol")
    await world.writes.run_read(preview.id, preview.fingerprint, ctx())
    assert world.fetched.tokens == ["tok_live_123456"]


def ledger_bytes(root: Path) -> bytes:
    """Every byte the ledger's files hold (its write-ahead log included)."""
    return b"".join(p.read_bytes() for p in sorted(root.glob("ledger.db*")))


# -- list placeholders ----------------------------------------------------------------------


class MailArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    to: Annotated[
        list[Annotated[str, Field(pattern=r"^[a-z]+@[a-z.]+$", max_length=64)]],
        Field(max_length=10),
    ]
    subject: Annotated[str, Field(max_length=100)]


class Mail(BaseModel):
    to: list[str]
    subject: str


class MailReceipt(BaseModel):
    message_id: str


def mail_tool(sent: list[Mail]) -> Any:
    return write_tool(
        name="mail_message_send",
        description=(
            "Send an e-mail to one or more recipients. Use it when the user asks to write to "
            "someone. It does not attach files."
        ),
        input_model=MailArgs,
        effect_model=Mail,
        receipt_model=MailReceipt,
        prepare=lambda args, principal: Mail(to=list(args.to), subject=args.subject),
        commit=lambda effect, key: sent.append(effect) or {"message_id": key[-8:]},
        effects=[write("mail:outbox/*"), disclose("email:{to[]}")],
        scope="mail.send",
    )


@pytest.mark.parametrize(
    ("to", "code", "effects"),
    [
        (["ann@acme.com"], None, ["write(mail:outbox/*)", "disclose(email:ann@acme.com)"]),
        (
            ["ann@acme.com", "raj@acme.com"],
            None,
            [
                "write(mail:outbox/*)",
                "disclose(email:ann@acme.com)",
                "disclose(email:raj@acme.com)",
            ],
        ),
        (["ann@acme.com", "eve@evil.com"], "denied", ["disclose(email:eve@evil.com)"]),
    ],
)
async def test_a_grant_allows_the_recipients_it_names_and_refuses_the_rest(
    tmp_path: Path, to: list[str], code: str | None, effects: list[str]
) -> None:
    sent: list[Mail] = []
    registry = Registry()
    registry.register(mail_tool(sent))
    ledger = SQLiteLedgerStore(tmp_path / "l.db")
    writes = WritePath(registry, ledger)
    allow = ApprovalPolicy((ApprovalRule(id="mail", action="allow", tools=("mail_*",)),))
    call = writes.preview_call("mail_message_send", {"to": to, "subject": "hi"}, ctx(allow))
    try:
        if code is None:
            preview = await call
            assert list(preview.effects) == effects
            await writes.commit(preview.id, preview.fingerprint, ALICE)
            assert sent == [Mail(to=to, subject="hi")]
            return
        with pytest.raises(ToolError) as info:
            await call
        assert info.value.code == code
        assert str(effects[0]) in info.value.message
        assert sent == []
    finally:
        ledger.close()


# -- registration of the new forms ----------------------------------------------------------


class Thing(BaseModel):
    id: str


Ids = Annotated[list[Annotated[str, Field(max_length=8)]], Field(max_length=5)]
OneId = Annotated[str, Field(max_length=8)]
SecretId = Annotated[str, Secret(), Field(max_length=8)]
Link = Annotated[str, Field(max_length=2048)]


def many(ids: Ids) -> Thing:
    """Read things. Use it to test registration. It returns nothing else."""
    return Thing(id="x")


def one(one: OneId) -> Thing:
    """Read a thing. Use it to test registration. It returns nothing else."""
    return Thing(id="x")


def keyed(key: SecretId) -> Thing:
    """Read a thing by a secret. Use it to test registration. It returns nothing else."""
    return Thing(id="x")


def linked(ids: Ids, url: Link) -> Thing:
    """Read things and a page. Use it to test registration. It returns nothing else."""
    return Thing(id="x")


@pytest.mark.parametrize(
    ("effects", "handler", "fragment"),
    [
        ([read("crm:c/{ids}")], many, "as one value; write {ids[]}"),
        ([read("crm:c/{one[]}")], one, "expands 'one', which is not a list"),
        ([read("crm:c/{key}")], keyed, "names the secret field 'key'"),
        ([network("{key}")], keyed, "names the secret field 'key'"),
    ],
)
def test_registration_refuses_placeholders_that_do_not_fit_their_fields(
    effects: list[Any], handler: Any, fragment: str
) -> None:
    registry = Registry()
    with pytest.raises(UsageError) as info:
        registry.tool(effects=effects, scope="crm.read", name="crm_thing_get")(handler)
    assert fragment in str(info.value)


def test_registration_accepts_the_new_forms() -> None:
    registry = Registry()
    registry.tool(
        effects=[read("crm:c/{ids[]}"), network("{url}")], scope="crm.read", name="crm_thing_get"
    )(linked)
    spec = registry.get("crm_thing_get")
    assert spec is not None
    assert spec.effects[1].takes_url
