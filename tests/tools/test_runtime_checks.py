"""Runtime checks of declarations: what a tool's code reaches while it runs is what it declares.

Each row of ``reach_world.ROWS`` is a tool that declares one loopback listener and does one
thing (connects, resolves a name or an address, listens, writes a file, starts a process,
signals one, uses a credential, catches the refusal itself); it runs with a sync and an async handler, directly and as a call from
code, and the host checks the answer, the audit record, and that nothing undeclared crossed.
``tests/bridge/test_runtime_checks_docker.py`` runs the same table from sandboxed programs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from airlock.policies import Grant, Principal, UsageError, network, read, write
from airlock.tools import (
    AuditLog,
    CallContext,
    Credential,
    DeniedError,
    LedgerLockedError,
    MemoryAuditStore,
    Registry,
    RestAdapter,
    RunAuthority,
    SQLiteAuditStore,
    SQLiteLedgerStore,
    ToolError,
    ToolSpec,
    WritePath,
    parse_destination,
    write_tool,
)
from airlock.tools._egress import CHECKED_EVENTS, DeclaredReach
from airlock.tools._egress_hook import UndeclaredReachError

from .loopback import Upstream, serve
from .reach_world import (
    ALICE,
    BEHAVIOURS,
    GRANT,
    ROWS,
    SCOPE,
    STOLEN,
    Done,
    Reach,
    World,
    build_registry,
    final_event,
    tool_name,
    world,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def here(tmp_path: Path) -> Iterator[World]:
    with world(tmp_path) as made:
        yield made


def test_the_table_has_a_row_for_every_behaviour() -> None:
    assert {row.name for row in ROWS} == set(BEHAVIOURS)


@pytest.mark.parametrize("caller", ["direct", "code"])
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("row", ROWS, ids=[f"{r.name}-{r.args['target']}" for r in ROWS])
async def test_a_tool_reaches_what_it_declares_and_nothing_else(
    here: World, row: Reach, mode: Literal["sync", "async"], caller: Literal["direct", "code"]
) -> None:
    registry = build_registry(here, Registry(audit=AuditLog(MemoryAuditStore())))
    authority = RunAuthority(principal=ALICE, grant=GRANT)
    name = tool_name(row, mode)
    if row.code is None:
        assert await registry.call(name, row.args, authority.context(caller, "c1")) == {
            "done": True
        }
    else:
        with pytest.raises(ToolError) as info:
            await registry.call(name, row.args, authority.context(caller, "c1"))
        assert info.value.code == row.code
        assert row.shows(here) in info.value.message
    event = final_event(registry.audit.events(run_id=authority.run_id), name)
    if row.rule is None:
        assert (event.decision, event.outcome, event.code) == ("allow", "ok", None)
    else:
        assert (event.stage, event.decision, event.rule) == ("execute", "deny", row.rule)
        assert (event.outcome, event.code) == ("error", "denied")
        assert row.shows(here) in (event.detail or "")
        assert not event.exercised
    if row.effect is not None:
        assert row.effect(here) in event.effects
    assert row.crossed(here) == 0, "something undeclared got through"
    assert os.environ[STOLEN] not in repr(registry.audit.events(run_id=authority.run_id))


# -- every watched event, refused inside a call and ignored outside one ---------------------

# One way to raise each watched event with arguments it refuses (raised with sys.audit, so
# the operation itself never runs even if the check failed).
EVENT_ARGS: dict[str, Callable[[World], tuple[Any, ...]]] = {
    "socket.connect": lambda w: (None, ("127.0.0.1", w.undeclared.port)),
    "socket.sendto": lambda w: (None, ("127.0.0.1", w.undeclared.port)),
    "socket.sendmsg": lambda w: (None, ("203.0.113.9", 53)),
    "socket.getaddrinfo": lambda w: ("exfil.example.invalid", 443, 0, 0, 0),
    "socket.gethostbyname": lambda w: ("exfil.example.invalid",),
    "socket.gethostbyname_ex": lambda w: ("exfil.example.invalid",),
    "socket.gethostbyaddr": lambda w: ("exfil.example.invalid",),
    "socket.getnameinfo": lambda w: (("203.0.113.9", 443),),
    "socket.bind": lambda w: (None, ("0.0.0.0", 0)),
    "socket.listen": lambda w: (w.declared.sock, 1),
    "open": lambda w: (str(w.leaked_file), "w", os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    "os.chmod": lambda w: (str(w.leaked_file), 0o777, None),
    "os.chown": lambda w: (str(w.leaked_file), 0, 0, None),
    "os.chflags": lambda w: (str(w.leaked_file), 0),
    "os.lchflags": lambda w: (str(w.leaked_file), 0),
    "os.link": lambda w: ("/etc/passwd", str(w.leaked_file), None, None),
    "os.mkdir": lambda w: (str(w.root / "made"), 0o777, None),
    "os.remove": lambda w: (str(w.leaked_file), None),
    "os.removexattr": lambda w: (str(w.leaked_file), "user.x"),
    "os.rename": lambda w: (str(w.leaked_file), str(w.root / "moved"), None, None),
    "os.rmdir": lambda w: (str(w.root), None),
    "os.setxattr": lambda w: (str(w.leaked_file), "user.x", b"1", 0),
    "os.symlink": lambda w: ("/etc/passwd", str(w.leaked_file), None),
    "os.truncate": lambda w: (str(w.leaked_file), 0),
    "os.utime": lambda w: (str(w.leaked_file), None, None, None),
    "shutil.rmtree": lambda w: (str(w.root), None),
    "subprocess.Popen": lambda w: ("/bin/true", ["true"], None, None),
    "os.system": lambda w: (b"true --flag secret",),
    "os.exec": lambda w: ("/bin/true", ["true"], None),
    "os.posix_spawn": lambda w: ("/bin/true", ["true"], {}),
    "os.spawn": lambda w: (os.P_WAIT, "/bin/true", ["true"], None),
    "_posixsubprocess.fork_exec": lambda w: ([b"/bin/true"], [b"/bin/true"]),
    "os.fork": lambda w: (),
    "os.forkpty": lambda w: (),
    "os.kill": lambda w: (os.getpid(), 0),
    "os.killpg": lambda w: (os.getpgid(0), 0),
    "signal.pthread_kill": lambda w: (threading.get_ident(), 0),
    "signal.pidfd_send_signal": lambda w: (-1, 0),
    "signal.raise_signal": lambda w: (0,),
    "airlock.process_pool": lambda w: (None, print),
    "os.putenv": lambda w: ("PATH", "/tmp/evil"),
    "os.unsetenv": lambda w: ("PATH",),
}


def test_every_watched_event_has_a_row() -> None:
    assert set(EVENT_ARGS) == set(CHECKED_EVENTS)


EventName = Literal[tuple(sorted(CHECKED_EVENTS))]  # type: ignore[valid-type]


def _event_registry(here: World) -> Registry:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("reach:event/*")], scope=SCOPE, callers={"direct", "code"},
                   destinations=[f"127.0.0.1:{here.declared.port}"])  # fmt: skip
    def reach_event_raise(event: EventName) -> Done:  # type: ignore[valid-type]
        """Raise one audit event. Use it to test the runtime checks. It returns nothing."""
        sys.audit(event, *EVENT_ARGS[event](here))
        return Done(done=True)

    return registry


@pytest.mark.parametrize("event", sorted(CHECKED_EVENTS))
async def test_every_watched_event_is_refused_inside_a_call_only(here: World, event: str) -> None:
    sys.audit(event, *EVENT_ARGS[event](here))  # outside any call: the harness's own, unchecked
    registry = _event_registry(here)
    authority = RunAuthority(principal=ALICE, grant=GRANT)
    with pytest.raises(DeniedError) as info:
        await registry.call("reach_event_raise", {"event": event}, authority.context("code", "1"))
    assert info.value.reason == "effect"
    [record] = registry.audit.events(run_id=authority.run_id)
    assert (record.decision, record.rule) == ("deny", f"runtime:{CHECKED_EVENTS[event]}")
    assert event in (record.detail or "")
    assert "secret" not in (record.detail or "")  # a shell line: only its program is named


async def test_an_event_the_check_cannot_read_is_refused(here: World) -> None:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("reach:event/*")], scope=SCOPE)
    def reach_odd_connect() -> Done:
        """Raise a malformed connect event. Use it to test the check fails closed. It
        returns nothing."""
        sys.audit("socket.connect")
        return Done(done=True)

    with pytest.raises(DeniedError, match="unreadable"):
        await registry.call(
            "reach_odd_connect",
            {},
            RunAuthority(principal=ALICE, grant=GRANT).context("direct", "1"),
        )


# -- attribution by context, not by address --------------------------------------------------


async def test_code_outside_the_call_is_not_the_tools(here: World, tmp_path: Path) -> None:
    # A durable audit store (its writer thread writes files) and a task of the harness that
    # connects to a destination the tool does not declare, while the tool's call is running.
    registry = Registry(audit=AuditLog(SQLiteAuditStore(tmp_path / "audit.db")))
    started, release = asyncio.Event(), asyncio.Event()

    @registry.tool(effects=[read("reach:slow/*")], scope=SCOPE,
                   destinations=[f"127.0.0.1:{here.declared.port}"])  # fmt: skip
    async def reach_slow_get() -> Done:
        """Wait while the harness works. Use it to test attribution. It returns nothing."""
        started.set()
        await release.wait()
        socket.create_connection(("127.0.0.1", here.declared.port), timeout=2).close()
        return Done(done=True)

    async def harness_work() -> None:
        await started.wait()
        _, writer = await asyncio.open_connection("127.0.0.1", here.undeclared.port)
        writer.close()
        (tmp_path / "harness.txt").write_text("the harness's own file")
        release.set()

    authority = RunAuthority(principal=ALICE, grant=GRANT)
    call = registry.call("reach_slow_get", {}, authority.context("direct", "1"))
    answer, _ = await asyncio.gather(call, harness_work())
    assert answer == {"done": True}
    assert (tmp_path / "harness.txt").exists()
    for _ in range(200):  # the listeners count on their own threads
        if here.undeclared.accepted and here.declared.accepted:
            break
        await asyncio.sleep(0.01)
    assert (here.undeclared.accepted, here.declared.accepted) == (1, 1)
    registry.audit.close()


async def test_a_task_the_tool_leaves_behind_is_still_refused(
    here: World, caplog: pytest.LogCaptureFixture
) -> None:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))
    late: list[BaseException] = []
    left: list[asyncio.Task[None]] = []

    async def exfiltrate_later() -> None:
        await asyncio.sleep(0.05)
        try:
            socket.create_connection(("127.0.0.1", here.undeclared.port), timeout=2).close()
        except OSError as exc:
            late.append(exc)

    @registry.tool(effects=[read("reach:late/*")], scope=SCOPE)
    async def reach_late_get() -> Done:
        """Start a task and return. Use it to test a task that outlives its call. It
        returns nothing."""
        left.append(asyncio.get_running_loop().create_task(exfiltrate_later()))
        return Done(done=True)

    with caplog.at_level(logging.WARNING, logger="airlock.tools"):
        answer = await registry.call(
            "reach_late_get", {}, RunAuthority(principal=ALICE, grant=GRANT).context("direct", "1")
        )
        await left[0]
    assert answer == {"done": True}  # the call had ended: it cannot change its answer
    assert isinstance(late[0], UndeclaredReachError)
    assert here.undeclared.accepted == 0
    assert "after its call ended" in caplog.text


# -- credentials -----------------------------------------------------------------------------


async def test_only_the_tenants_own_credential_is_revealed(here: World) -> None:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))
    tokens = {"TOK_ACME": "acme-secret", "TOK_GLOBEX": "globex-secret"}

    @registry.tool(effects=[read("reach:cred/*")], scope=SCOPE,
                   destinations=[f"127.0.0.1:{here.declared.port}"],
                   tenant_credentials={"acme": "TOK_ACME", "globex": "TOK_GLOBEX"})  # fmt: skip
    def reach_cred_get(which: Literal["TOK_ACME", "TOK_GLOBEX"]) -> Done:
        """Reveal one credential. Use it to test tenant credentials. It returns nothing."""
        Credential.from_value(tokens[which], name=which).reveal()
        return Done(done=True)

    ctx = RunAuthority(principal=ALICE, grant=GRANT).context("direct", "1")
    assert await registry.call("reach_cred_get", {"which": "TOK_ACME"}, ctx) == {"done": True}
    with pytest.raises(DeniedError, match="TOK_GLOBEX"):
        await registry.call("reach_cred_get", {"which": "TOK_GLOBEX"}, ctx)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with serve(Upstream()) as up:
        yield up


async def test_an_adapter_that_declares_no_credential_sends_none(
    upstream: Upstream, here: World
) -> None:
    secret = os.environ[STOLEN]  # a secret in the environment under a name nobody declared
    bare = RestAdapter(upstream.base_url, max_attempts=1)
    with pytest.raises(DeniedError) as info:
        await bare.get(("a",), credential=Credential.from_env(STOLEN))
    assert "none" in (info.value.detail or "")
    other = RestAdapter(upstream.base_url, credentials=["DECLARED_TOKEN"], max_attempts=1)
    with pytest.raises(DeniedError):
        await other.get(("a",), credential=Credential.from_env(STOLEN))
    assert upstream.seen == []  # nothing was sent at all
    assert await bare.get(("a",), credential=None) == {"raw_path": "/a"}
    [request] = upstream.seen
    assert "authorization" not in request.headers
    assert secret not in repr(request)


# -- write tools: prepare, commit and lookup ---------------------------------------------------


class Note(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: Literal["a.txt", "b.txt"]
    outside: bool = False
    where: Literal["declared", "undeclared"] = "declared"


class NoteEffect(BaseModel):
    name: str
    outside: bool
    where: str


class NoteReceipt(BaseModel):
    written: str


def _write_registry(here: World, directory: Path, *, lookup_reaches: bool = False) -> Registry:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    def prepare(args: Note, principal: Principal) -> NoteEffect:
        if args.where == "undeclared":
            socket.create_connection(("127.0.0.1", here.undeclared.port), timeout=2).close()
        return NoteEffect(name=args.name, outside=args.outside, where=args.where)

    def commit(effect: NoteEffect, key: str) -> dict[str, str]:
        target = (here.root if effect.outside else directory) / effect.name
        target.write_text(key)
        if lookup_reaches:
            raise ConnectionResetError("the answer was lost")
        return {"written": str(target)}

    def lookup(effect: NoteEffect, key: str) -> dict[str, str] | None:
        socket.create_connection(("127.0.0.1", here.undeclared.port), timeout=2).close()
        return None

    registry.register(
        write_tool(
            name="reach_note_write",
            description="Write a note file. Use it to test commits. It returns the path.",
            input_model=Note,
            effect_model=NoteEffect,
            receipt_model=NoteReceipt,
            prepare=prepare,
            commit=commit,
            lookup=lookup if lookup_reaches else None,
            effects=[write(f"file:{directory}/{{name}}")],
            scope="reach.write",
            destinations=[f"127.0.0.1:{here.declared.port}"],
        )
    )
    return registry


WRITER = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({SCOPE, "reach.write"}))
WRITE_GRANT = Grant(scopes=WRITER.scopes, effects=(read("reach:**"), write("file:**")))


async def _approved(writes: WritePath, args: dict[str, object], ctx: CallContext) -> Any:
    preview = await writes.preview_call("reach_note_write", args, ctx)
    writes.approve(preview.id, approver="ops", fingerprint=preview.fingerprint)
    return preview


@pytest.fixture
def notes_dir(tmp_path: Path) -> Path:
    made = tmp_path / "notes"
    made.mkdir()
    return made


async def test_prepare_that_reaches_an_undeclared_host_is_denied(
    here: World, notes_dir: Path, tmp_path: Path
) -> None:
    registry = _write_registry(here, notes_dir)
    writes = WritePath(registry, SQLiteLedgerStore(tmp_path / "ledger.db"))
    authority = RunAuthority(principal=WRITER, grant=WRITE_GRANT)
    with pytest.raises(DeniedError, match=str(here.undeclared.port)):
        await writes.preview_call(
            "reach_note_write",
            {"name": "a.txt", "where": "undeclared"},
            authority.context("direct", "1"),
        )
    [event] = registry.audit.events(run_id=authority.run_id)
    assert (event.decision, event.rule, event.code) == ("deny", "runtime:network", "denied")
    assert writes.ledger.previews(limit=10) == []
    assert here.undeclared.accepted == 0


async def test_commit_writes_only_the_files_its_effects_name(
    here: World, notes_dir: Path, tmp_path: Path
) -> None:
    registry = _write_registry(here, notes_dir)
    writes = WritePath(registry, SQLiteLedgerStore(tmp_path / "ledger.db"))
    authority = RunAuthority(principal=WRITER, grant=WRITE_GRANT)
    ctx = authority.context("direct", "1")
    inside = await _approved(writes, {"name": "a.txt"}, ctx)
    receipt = await writes.commit(inside.id, inside.fingerprint, WRITER)
    assert receipt.data == {"written": str(notes_dir / "a.txt")}

    outside = await _approved(writes, {"name": "b.txt", "outside": True}, ctx)
    with pytest.raises(DeniedError) as info:
        await writes.commit(outside.id, outside.fingerprint, WRITER)
    assert info.value.outcome == "unknown"  # it may have acted before it was stopped
    assert str(here.root / "b.txt") in info.value.message
    assert not (here.root / "b.txt").exists()
    assert writes.ledger.preview(outside.id).state == "unknown"  # type: ignore[union-attr]
    refused = [e for e in registry.audit.events(run_id=authority.run_id) if e.decision == "deny"]
    assert [(e.stage, e.rule, e.outcome, e.code) for e in refused] == [
        ("execute", "runtime:file", "unknown", "denied")
    ]


async def test_a_commit_stopped_by_the_check_is_denied_even_when_the_ledger_fails(
    here: World, notes_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = _write_registry(here, notes_dir)
    writes = WritePath(registry, SQLiteLedgerStore(tmp_path / "ledger.db"))
    ctx = RunAuthority(principal=WRITER, grant=WRITE_GRANT).context("direct", "1")
    outside = await _approved(writes, {"name": "b.txt", "outside": True}, ctx)
    real = writes.ledger.transition

    def transition(preview_id: str, **kw: Any) -> Any:
        if kw["to"] == "unknown":
            raise LedgerLockedError("the ledger is locked", path="ledger.db")
        return real(preview_id, **kw)

    monkeypatch.setattr(writes.ledger, "transition", transition)
    with pytest.raises(DeniedError) as info:  # the refusal, never the ledger's error
        await writes.commit(outside.id, outside.fingerprint, WRITER)
    assert info.value.outcome == "unknown"
    assert not (here.root / "b.txt").exists()
    # Not marked: still ``sending``, so its lease lets reconcile find it.
    assert writes.ledger.preview(outside.id).state == "sending"  # type: ignore[union-attr]


async def test_a_lookup_that_reaches_an_undeclared_host_leaves_the_step_unresolved(
    here: World, notes_dir: Path, tmp_path: Path
) -> None:
    registry = _write_registry(here, notes_dir, lookup_reaches=True)
    writes = WritePath(registry, SQLiteLedgerStore(tmp_path / "ledger.db"))
    ctx = RunAuthority(principal=WRITER, grant=WRITE_GRANT).context("direct", "1")
    preview = await _approved(writes, {"name": "a.txt"}, ctx)
    with pytest.raises(ToolError) as info:
        await writes.commit(preview.id, preview.fingerprint, WRITER)
    assert info.value.code == "ambiguous_write"
    [resolution] = await writes.reconcile()
    assert (resolution.outcome, resolution.after) == ("unresolved", "unknown")
    assert "runtime check" in resolution.how
    assert str(here.undeclared.port) in resolution.how
    assert here.undeclared.accepted == 0


# -- registration: declarations the check cannot hold a tool to ------------------------------


class _Adapter:
    def __init__(self, destinations: list[str], credentials: list[str]) -> None:
        self.destinations = destinations
        self.credentials = credentials

    async def __call__(self) -> Done:
        return Done(done=True)


# name -> (effects, destinations, credentials, adapter or None, a fragment of the refusal)
INCONSISTENT: dict[str, tuple[list[Any], list[str], list[str], _Adapter | None, str]] = {
    "network effect naming every host": ([network("*")], [], [], None, "every host"),
    "network effect naming no host": ([network("svc:thing")], [], [], None, "names no host"),
    "destination naming every host": ([], ["*.*"], [], None, "every host"),
    "credentials sent nowhere": ([], [], ["SVC_TOKEN"], None, "no destination to send them"),
    "adapter destination outside": (
        [],
        ["https://api.svc.example"],
        [],
        _Adapter(["https://evil.example"], []),
        "outside the destinations",
    ),
    "adapter destination on another port": (
        [],
        ["https://api.svc.example"],
        [],
        _Adapter(["https://api.svc.example:22"], []),
        "outside the destinations",
    ),
    "adapter socket below a declared socket path": (
        [],
        ["unix:///run/svc"],
        [],
        _Adapter(["unix:///run/svc/admin.sock"], []),
        "outside the destinations",
    ),
    "adapter credential outside": (
        [],
        ["https://api.svc.example"],
        ["SVC_TOKEN"],
        _Adapter(["https://api.svc.example"], ["ADMIN_TOKEN"]),
        "which the tool does not declare",
    ),
}


class _NoInput(BaseModel):
    model_config = ConfigDict(extra="forbid")


async def _nothing() -> Done:
    return Done(done=True)


@pytest.mark.parametrize("case", sorted(INCONSISTENT))
def test_registration_refuses_declarations_it_cannot_check(case: str) -> None:
    effects, destinations, credentials, adapter, fragment = INCONSISTENT[case]
    registry = Registry()
    spec = ToolSpec(
        name="svc_thing_get",
        description="Get a thing. Use it to test registration. It returns nothing else.",
        handler=adapter or _nothing,
        input_model=_NoInput,
        output_model=Done,
        effects=(read("svc:thing/*"), *effects),
        callers=frozenset({"direct"}),
        scope="svc.read",
        destinations=tuple(destinations),
        credentials=tuple(credentials),
    )
    with pytest.raises(UsageError, match=fragment):
        registry.register(spec)
    assert registry.specs() == ()


def test_a_url_effect_a_unix_socket_and_an_adapters_own_reach_are_accepted() -> None:
    registry = Registry()

    @registry.tool(effects=[read("svc:page/*"), network("{url}")], scope="svc.read",
                   destinations=["unix:///run/svc.sock"], credentials=["SVC_TOKEN"])  # fmt: skip
    def svc_page_get(url: Annotated[str, Field(max_length=200)]) -> Done:
        """Get a page. Use it to test registration. It returns nothing else."""
        return Done(done=True)

    spec = registry.get("svc_page_get")
    assert spec is not None
    assert spec.destinations == ("unix:///run/svc.sock",)


# -- matching a connection with a declared destination -----------------------------------------

# declared -> (host as connected, port, whether it is that destination)
MATCHES: list[tuple[str, str, int, bool]] = [
    ("https://api.example.com", "api.example.com", 443, True),
    ("https://api.example.com", "api.example.com", 80, False),
    ("http://api.example.com/v1", "api.example.com", 80, True),
    ("api.example.com", "api.example.com", 8443, True),
    ("api.example.com:8443", "api.example.com", 443, False),
    ("*.example.com", "a.b.example.com", 443, True),
    ("*.example.com", "example.com", 443, False),
    ("*.example.com", "example.com.evil.example", 443, False),
    ("10.0.0.7:5432", "10.0.0.7", 5432, True),
    ("10.0.0.7:5432", "10.0.0.8", 5432, False),
    ("[2001:db8::1]:443", "2001:db8::1", 443, True),
    ("[2001:db8::1]:443", "2001:db8:0:0::1", 443, True),
    ("postgres://db.internal", "db.internal", 6543, True),
    ("localhost", "127.0.0.1", 80, False),  # an address counts for a name only via a lookup
    ("unix:///run/app.sock", "run", 80, False),
]


@pytest.mark.parametrize(("declared", "host", "port", "expected"), MATCHES)
def test_a_connection_matches_a_destination_by_host_and_port(
    declared: str, host: str, port: int, expected: bool
) -> None:
    destination = parse_destination(declared)
    assert (destination.matches_host(host) and destination.allows_port(port)) is expected


def test_a_declared_reach_lists_static_network_effects_as_destinations() -> None:
    registry = Registry()

    @registry.tool(effects=[read("svc:x/*"), network("https://docs.example.com/**")],
                   scope="svc.read")  # fmt: skip
    def svc_doc_get() -> Done:
        """Get a doc. Use it to test. It returns nothing else."""
        return Done(done=True)

    spec = registry.get("svc_doc_get")
    assert spec is not None
    reach = DeclaredReach.of(spec)
    assert [d.text for d in reach.destinations] == ["https://docs.example.com/**"]
    assert reach.network == ()


# -- the process's own files ----------------------------------------------------------------


async def test_the_interpreter_and_logging_may_write_their_own_files(
    here: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A module first imported inside a call gets its bytecode cached, and a log file opened
    # lazily by logging is the process's: neither is the tool writing a file.
    package = tmp_path / "fresh_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    log_file = tmp_path / "operator.log"
    handler = logging.FileHandler(log_file, delay=True)
    logger = logging.getLogger("reach.operator")
    logger.addHandler(handler)
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("reach:own/*")], scope=SCOPE)
    def reach_own_get() -> Done:
        """Import a module and log a line. Use it to test the process's files. It returns
        nothing."""
        import fresh_pkg  # type: ignore[import-not-found]

        logger.warning("value %s", fresh_pkg.VALUE)
        return Done(done=True)

    try:
        ctx = RunAuthority(principal=ALICE, grant=GRANT).context("direct", "1")
        assert await registry.call("reach_own_get", {}, ctx) == {"done": True}
    finally:
        logger.removeHandler(handler)
        handler.close()
        sys.modules.pop("fresh_pkg", None)
    assert list((package / "__pycache__").glob("__init__.*.pyc"))
    assert "value 42" in log_file.read_text()


# -- names asyncio resolves on its own threads ------------------------------------------------


@pytest.mark.parametrize(("target", "code"), [("declared", None), ("undeclared", "denied")])
async def test_a_name_asyncio_resolves_outside_the_call_is_judged_by_its_addresses(
    here: World, target: Literal["declared", "undeclared"], code: str | None
) -> None:
    # asyncio looks names up on its executor's threads, where no call is current: the
    # connection is judged by the names this process resolved its address from.
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("reach:aio/*")], scope=SCOPE,
                   destinations=[f"localhost:{here.declared.port}"])  # fmt: skip
    async def reach_aio_get(to: Literal["declared", "undeclared"]) -> Done:
        """Connect with asyncio. Use it to test asyncio's resolver. It returns nothing."""
        _, writer = await asyncio.open_connection("localhost", here.port(to))
        writer.close()
        return Done(done=True)

    ctx = RunAuthority(principal=ALICE, grant=GRANT).context("direct", "1")
    if code is None:
        assert await registry.call("reach_aio_get", {"to": target}, ctx) == {"done": True}
    else:
        with pytest.raises(DeniedError, match=str(here.undeclared.port)):
            await registry.call("reach_aio_get", {"to": target}, ctx)
    assert here.undeclared.accepted == 0
