"""Every command that opens the ledger or the audit store, given an unusable file, prints one
line naming the file and the problem and exits 2; never a traceback.

The commands come from the ``airlock`` app itself: each must be listed in :data:`STORES` (what
it opens and how) or in :data:`NO_STORE`, so a new command fails here until it is.
"""

from __future__ import annotations

import getpass
import importlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio
import pytest
import typer
from typer.testing import CliRunner

from airlock.cli import app
from airlock.cli._app import one_line_errors
from airlock.tools import (
    ApprovalMismatchError,
    LedgerLockedError,
    SQLiteAuditStore,
    SQLiteLedgerStore,
    approve_preview,
)
from tests.airlock.inventory_registry import POLICY_ARG, REGISTRY_REF, REPO
from tests.tools.test_write_world import ALICE, ASK, World

runner = CliRunner()
Store = Literal["ledger", "audit"]
Mode = Literal["reads", "writes"]
FILES: dict[Store, str] = {"ledger": "ledger.db", "audit": "audit.db"}
LABELS: dict[Store, str] = {"ledger": "the ledger", "audit": "the audit store"}
PROGRAM = "program.py"
# A fresh registry per command: a shared one keeps the audit store an earlier session gave it.
FRESH = "tests.airlock.inventory_registry:build_registry"
SESSION = ["--registry", FRESH, "--policy", str(REPO / POLICY_ARG), "--user", "alice"]


@dataclass(frozen=True)
class Opens:
    """How a command is invoked (``{home}`` is AIRLOCK_HOME) and which stores it opens."""

    args: tuple[str, ...]
    stores: dict[Store, Mode]
    serves: bool = False
    """Given usable stores it serves until stopped (so it meets only unusable ones here)."""


STORES: dict[str, Opens] = {
    "run": Opens((f"{{home}}/{PROGRAM}",), {"audit": "writes"}),
    "audit effects": Opens(
        ("run_0", "--registry", REGISTRY_REF, "--policy", str(REPO / POLICY_ARG)),
        {"audit": "reads"},
    ),
    "audit find": Opens(("--resource", "billing:invoice/*"), {"audit": "reads"}),
    "audit list": Opens((), {"audit": "reads"}),
    "audit show": Opens(("run_0",), {"audit": "reads"}),
    "audit program": Opens(("abc",), {"audit": "reads"}),
    "audit verify": Opens((), {"audit": "reads"}),
    "audit export": Opens((), {"audit": "reads"}),
    "approvals list": Opens((), {"ledger": "reads"}),
    "approvals serve": Opens(("--as", "carol"), {"ledger": "writes"}, serves=True),
    "approvals show": Opens(("pv_0",), {"ledger": "reads"}),
    "approvals approve": Opens(
        ("pv_0", "--fingerprint", "0" * 64, "--as", "carol"), {"ledger": "writes"}
    ),
    "approvals deny": Opens(("pv_0", "--reason", "no", "--as", "carol"), {"ledger": "writes"}),
    "receipts list": Opens((), {"ledger": "reads"}),
    "reconcile": Opens((), {"ledger": "reads"}),
    "serve": Opens((*SESSION, "--mcp"), {"ledger": "writes", "audit": "writes"}),
    "chat": Opens(
        ("hi", *SESSION, "--replay", str(REPO / "examples/billing/demo_replay.json")),
        {"ledger": "writes", "audit": "writes"},
    ),
}
NO_STORE = {"doctor", "inventory", "program-effects", "artifacts list", "artifacts get"}


def _commands(group: object, prefix: str = "") -> Iterator[str]:
    commands: dict[str, object] = getattr(group, "commands", {})
    for name, command in sorted(commands.items()):
        if hasattr(command, "commands"):  # a group of commands
            yield from _commands(command, f"{prefix}{name} ")
        else:
            yield prefix + name


COMMANDS = sorted(_commands(typer.main.get_group(app)))


def test_every_command_is_classified() -> None:
    unlisted = [c for c in COMMANDS if c not in STORES and c not in NO_STORE]
    assert unlisted == [], "say in STORES or NO_STORE what these commands open"
    assert set(STORES) | NO_STORE == set(COMMANDS)


# -- the kinds of unusable file ---------------------------------------------------------------

Expect = tuple[str, str] | None
"""(code, what the message says) of the one line; ``None``: the store is usable this way."""


def _good(store: Store, path: Path) -> None:
    if store == "ledger":
        SQLiteLedgerStore(path).close()
    else:
        SQLiteAuditStore(path).close()


def _text(store: Store, path: Path) -> None:
    path.write_text("hello, this is not a database\n")


def _empty(store: Store, path: Path) -> None:
    path.write_bytes(b"")


def _directory(store: Store, path: Path) -> None:
    path.mkdir()


def _truncated(store: Store, path: Path) -> None:
    _good(store, path)
    path.write_bytes(path.read_bytes()[:1500])


def _corrupt(store: Store, path: Path) -> None:
    _good(store, path)
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xa5" * (4096 - 100)  # page 1 past the header: the schema's b-tree
    path.write_bytes(bytes(data))


def _foreign(store: Store, path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    conn.close()


@dataclass(frozen=True)
class Kind:
    make: Callable[[Store, Path], None]
    reads: Expect
    writes: Expect


NOT_SQLITE = ("ledger_not_database", "is not an SQLite database")
DIRECTORY = ("ledger_unavailable", "is a directory")
DAMAGED = ("ledger_corrupt", "is damaged")
FOREIGN = ("ledger_not_database", "is an SQLite database but not")
KINDS: dict[str, Kind] = {
    "text file": Kind(_text, reads=NOT_SQLITE, writes=NOT_SQLITE),
    # An empty file holds nothing: read, it is no store yet; opened to write, it becomes a
    # new store and the log says so.
    "empty file": Kind(_empty, reads=("ledger_not_database", "is an empty file"), writes=None),
    "directory": Kind(_directory, reads=DIRECTORY, writes=DIRECTORY),
    "truncated": Kind(_truncated, reads=DAMAGED, writes=DAMAGED),
    "corrupt": Kind(_corrupt, reads=DAMAGED, writes=DAMAGED),
    "another program's database": Kind(_foreign, reads=FOREIGN, writes=FOREIGN),
}

CASES = [
    pytest.param(command, store, kind, id=f"{command}-{store}-{kind}")
    for command, opens in sorted(STORES.items())
    for store, mode in opens.stores.items()
    for kind in KINDS
    if not (opens.serves and getattr(KINDS[kind], mode) is None)
]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / PROGRAM).write_text("1 + 1\n")
    return home


def _prepare(home: Path, bad: Store, make: Callable[[Store, Path], None]) -> Path:
    for store, name in FILES.items():
        if store != bad:
            _good(store, home / name)
    path = home / FILES[bad]
    make(bad, path)
    return path


def _env(home: Path) -> dict[str, str]:
    # An engine that is not there: a command that got past its stores says so (exit 3).
    return {
        "AIRLOCK_HOME": str(home),
        "AIRLOCK_BUSY_TIMEOUT": "0.1",
        "DOCKER_HOST": "unix:///nonexistent/docker.sock",
        "ANTHROPIC_API_KEY": "",
    }


def _args(command: str, home: Path) -> list[str]:
    return [*command.split(), *(a.format(home=home) for a in STORES[command].args)]


def _assert_one_line(output: str, code: str, store: Store, path: Path, says: str) -> None:
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    pattern = rf"error \({code}\): {LABELS[store]} {re.escape(repr(str(path)))} .*{says}.*"
    assert re.fullmatch(pattern, lines[0]), lines[0]
    assert "Traceback" not in output


@pytest.mark.parametrize(("command", "store", "kind"), CASES)
def test_an_unusable_store_is_one_line_and_exit_2(
    command: str, store: Store, kind: str, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _prepare(home, store, KINDS[kind].make)
    mode = STORES[command].stores[store]
    expect = getattr(KINDS[kind], mode)
    result = runner.invoke(app, _args(command, home), env=_env(home))
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), repr(result.exception)
    if expect is None:  # an empty file opened to write: it is a new store now
        assert (kind, mode) == ("empty file", "writes")
        assert "error (ledger_" not in result.output  # it went on (to not_found, or Docker)
        assert "is an empty file (0 bytes); it is initialised as a new one" in caplog.text
        marker = "previews" if store == "ledger" else "audit_events"
        with sqlite3.connect(path) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        conn.close()
        assert marker in tables
        return
    code, says = expect
    assert result.exit_code == 2, result.output
    _assert_one_line(result.output, code, store, path, says)


LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA locking_mode=EXCLUSIVE")
conn.execute("BEGIN EXCLUSIVE")
conn.execute("CREATE TABLE IF NOT EXISTS held (x)")
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def locker() -> Iterator[Callable[[Path], None]]:
    held: list[subprocess.Popen[str]] = []

    def lock(path: Path) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-c", LOCK, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        held.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline() == "held\n"

    yield lock
    for proc in held:
        proc.communicate(timeout=10)


@pytest.mark.parametrize(
    ("command", "store"),
    [pytest.param(c, s, id=f"{c}-{s}") for c, o in sorted(STORES.items()) for s in o.stores],
)
def test_a_locked_store_gives_up_after_the_busy_timeout(
    command: str, store: Store, home: Path, locker: Callable[[Path], None]
) -> None:
    path = _prepare(home, store, _good)
    locker(path)
    result = runner.invoke(app, _args(command, home), env=_env(home))
    assert result.exit_code == 2, result.output
    _assert_one_line(result.output, "ledger_locked", store, path, "is locked")


# -- read-only files and folders: as a user who may not write them ------------------------

NOBODY = 65534
LAZY = ("logging.config", "airlock.frontends.mcp", "airlock.cli._approval_page")
"""What commands import when they run (so a child that cannot read the interpreter's
installation, as ``nobody`` may not, finds them loaded)."""


def _as_user(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """``airlock ARGS`` in a forked child that dropped to uid/gid ``nobody`` (root may write
    any file, so a read-only file means nothing to it)."""
    for module in LAZY:  # imported here: the child may not read the interpreter's folder
        importlib.import_module(module)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            result = CliRunner().invoke(app, args, env=env)
            answer = [result.exit_code, result.output]
        except BaseException as exc:
            answer = [99, f"{type(exc).__name__}: {exc}"]
        with os.fdopen(write, "w") as out:
            out.write(json.dumps(answer))
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answers:
        code, output = json.loads(answers.read())
    os.waitpid(pid, 0)
    return int(code), str(output)


@pytest.fixture
def open_home() -> Iterator[Path]:
    """A home that user ``nobody`` can reach (pytest's own temporary folders are 0700)."""
    base = Path(tempfile.mkdtemp(prefix="airlock-ro-"))
    base.chmod(0o755)
    home = base / "home"
    home.mkdir()
    (home / PROGRAM).write_text("1 + 1\n")
    yield home
    for folder in (base, home):
        folder.chmod(0o755)
    shutil.rmtree(base)


def _chown(path: Path, uid: int) -> None:
    if os.geteuid() == 0:
        os.chown(path, uid, uid)


READ_ONLY = ["file", "folder"]


@pytest.mark.parametrize(
    ("command", "store", "what"),
    [
        pytest.param(c, s, w, id=f"{c}-{s}-{w}")
        for c, o in sorted(STORES.items())
        for s, m in o.stores.items()
        for w in READ_ONLY
        if not (o.serves and m == "reads")
    ],
)
def test_a_read_only_store_is_read_but_not_written(
    command: str, store: Store, what: str, open_home: Path
) -> None:
    home = open_home
    path = _prepare(home, store, _good)
    user = NOBODY if os.geteuid() == 0 else os.geteuid()
    for name in [PROGRAM, *FILES.values(), *(f"{f}.key" for f in FILES.values())]:
        if (home / name).exists():
            _chown(home / name, user)
    if what == "file":
        _chown(home, user)
        path.chmod(0o444)
    else:
        home.chmod(0o555)  # and owned by root (or by us: read-only all the same)
    args = _args(command, home)
    if os.geteuid() == 0:
        code, output = _as_user(args, _env(home))
    else:
        result = runner.invoke(app, args, env=_env(home))
        code, output = result.exit_code, result.output
    assert "Traceback" not in output
    mode = STORES[command].stores[store]
    if mode == "writes":
        assert code == 2, output
        if what == "folder":  # the first store the command opens there is refused
            first = next(s for s in STORES[command].stores if STORES[command].stores[s] == mode)
            store, path = first, home / FILES[first]
        _assert_one_line(output, "ledger_readonly", store, path, "read-only")
    elif what == "file":  # SQLite writes its shared memory beside the file: readable
        assert "error (ledger_" not in output, output
        assert code != 2, output
    else:  # ... which it cannot create in a read-only folder
        assert code == 2, output
        _assert_one_line(output, "ledger_readonly", store, path, "cannot be read here")


@pytest.mark.parametrize("value", ["oops", "0", "-1", "1e9"])
def test_a_malformed_busy_timeout_is_one_line(home: Path, value: str) -> None:
    _prepare(home, "ledger", _good)
    result = runner.invoke(
        app, ["approvals", "list"], env=_env(home) | {"AIRLOCK_BUSY_TIMEOUT": value}
    )
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith("error (usage_error): ")
    assert "AIRLOCK_BUSY_TIMEOUT" in result.output or "busy_timeout" in result.output


# -- approvals: a non-ASCII fingerprint, no login name ------------------------------------


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.close()


NOT_FINGERPRINTS = ["é", "0" * 63 + "é", "😀" * 64, "\udcff", ""]


@pytest.mark.parametrize("given", NOT_FINGERPRINTS, ids=repr)
def test_a_non_ascii_fingerprint_is_an_approval_mismatch(world: World, given: str) -> None:
    waiting = anyio.run(lambda: world.prepare("inv_3", approvals=ASK))
    ledger = ["--ledger", str(world.root / "ledger.db")]
    result = runner.invoke(
        app, ["approvals", "approve", waiting.id, "--fingerprint", given, "--as", "carol", *ledger]
    )
    assert result.exit_code == 1, result.output
    assert result.output.strip().startswith(("approval_mismatch: ", "invalid_input: "))
    assert "Traceback" not in result.output
    assert world.ledger.approval(waiting.id) is None
    with pytest.raises(ApprovalMismatchError):
        approve_preview(world.ledger, waiting.id, approver="carol", now=2e9, fingerprint=given)
    world.writes.approve(waiting.id, approver="carol", fingerprint=waiting.fingerprint)
    with pytest.raises(ApprovalMismatchError):
        anyio.run(world.writes.commit, waiting.id, given, ALICE)


@pytest.mark.parametrize("missing", [OSError("no login"), KeyError("getpwuid(): uid not found")])
@pytest.mark.parametrize(
    "command",
    [["approve", "--fingerprint", "0" * 64], ["deny", "--reason", "no"]],
    ids=["approve", "deny"],
)
def test_no_login_name_and_no_as_is_one_line(
    world: World, monkeypatch: pytest.MonkeyPatch, missing: Exception, command: list[str]
) -> None:
    waiting = anyio.run(lambda: world.prepare("inv_3", approvals=ASK))

    def no_name() -> str:
        raise missing

    monkeypatch.setattr(getpass, "getuser", no_name)
    verb, *options = command
    args = ["approvals", verb, waiting.id, *options, "--ledger", str(world.root / "ledger.db")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert line == (
        f"error (usage_error): there is no login name for user id {os.getuid()} (no LOGNAME "
        "or USER, no passwd entry); pass --as YOUR_ID"
    )
    stored = world.ledger.preview(waiting.id)
    assert stored is not None
    assert stored.state == "prepared"


def test_every_command_runs_under_one_line_errors() -> None:
    group = typer.main.get_group(app)

    def callbacks(node: object) -> Iterator[tuple[str, object]]:
        for name, command in getattr(node, "commands", {}).items():
            if hasattr(command, "commands"):
                yield from callbacks(command)
            else:
                yield name, command.callback

    found = dict(callbacks(group))
    assert found
    assert {n for n, c in found.items() if not getattr(c, "one_line_errors", False)} == set()


@pytest.mark.parametrize(
    "raised",
    [
        LedgerLockedError("the ledger 'x.db' is locked", path="x.db"),
        ExceptionGroup(
            "task group", [LedgerLockedError("the ledger 'x.db' is locked", path="x.db")]
        ),
        BaseExceptionGroup(
            "nested",
            [
                ExceptionGroup(
                    "inner", [LedgerLockedError("the ledger 'x.db' is locked", path="x.db")]
                )
            ],
        ),
    ],
    ids=["alone", "in a task group", "nested"],
)
def test_a_ledger_error_from_a_task_group_is_one_line(
    raised: BaseException, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit) as exited, one_line_errors():
        raise raised
    assert exited.value.exit_code == 2
    assert capsys.readouterr().err == "error (ledger_locked): the ledger 'x.db' is locked\n"


def test_other_errors_in_a_group_are_not_hidden() -> None:
    mixed = ExceptionGroup("mixed", [LedgerLockedError("locked", path="x"), ValueError("bug")])
    with pytest.raises(ExceptionGroup), one_line_errors():
        raise mixed
