"""What a kept session's next program gets back from a file of names a program forged.

Every process of a kept container runs as the same user, so a program can write the file its
successor's names are read from. Reading it back runs nothing of the writer's: an entry that
is not what ``keep`` writes is left out and said, whatever it holds. A ``def`` is defined again
only as ``keep`` writes it (no annotations, decorators or defaults that are not literals: they
are evaluated in the next program's namespace, ``tools`` and all); a pickle of data builds
nothing larger than its bytes say (no call of ``bytes(60_000_000)``); a module comes back only
when the next program's process has it loaded already (importing ``this`` again would print
the Zen in the next program's output). On the host (the guest's ``airlock_kept``) in both
language modes, and in a real kept container under each runtime.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import pickle
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from airlock.bridge import ToolSession
from airlock.sandbox import DockerBackend
from airlock.tools import AuditLog, MemoryAuditStore
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.sandbox.guest_image import load_guest
from tests.sandbox.runtimes import RUNTIMES, started_backend

kept = load_guest("airlock_kept")
kept_data = load_guest("airlock_kept_data")
kept_file = load_guest("airlock_kept_file")
language = load_guest("airlock_language")
bridge = load_guest("airlock_bridge")
wire = load_guest("airlock_wire")

ALLOWED = frozenset(wire.WARM_UP_IMPORTS)
MODES = ["full", "restricted"]
GOOD_DATA = {"n": pickle.dumps(7, protocol=5)}
GOOD_FUNCTIONS = {"add": "def add(xs):\n    return sum(xs)"}
GOOD_MODULES = {"json": "json"}


def _restore(
    path: Path,
    mode: str,
    *,
    data: dict[str, bytes] | None = None,
    functions: dict[str, str] | None = None,
    modules: dict[str, str] | None = None,
) -> tuple[dict[str, Any], Any, list[str]]:
    """Restore a file of the good names and these into a fresh namespace of ``mode``: the
    namespace, the reader and what a forged entry's code put in ``ran`` (a name of it)."""
    path.write_bytes(
        kept_file.encode_names(
            {**GOOD_DATA, **(data or {})},
            {**GOOD_FUNCTIONS, **(functions or {})},
            {**GOOD_MODULES, **(modules or {})},
        )
    )
    reader = kept.KeptGlobals(str(path))
    reader.read()
    tools = bridge.Tools(None, [])
    if mode == "restricted":
        namespace = dict(language.restricted_globals(ALLOWED, lambda _value: None, tools))
        guard = lambda value: language.refusal(value, ALLOWED)  # noqa: E731
    else:
        namespace = dict(language.full_globals(lambda _value: None, tools))
        guard = None
    ran: list[str] = []
    namespace["ran"] = ran
    compile_definition = lambda text: language.compile_program(text, mode, ALLOWED)[0]  # noqa: E731
    reader.restore(namespace, compile_definition, guard)
    return namespace, reader, ran


def _assert_good_names_back(namespace: dict[str, Any]) -> None:
    assert namespace["n"] == 7
    assert namespace["add"]([1, 2]) == 3
    assert namespace["json"].dumps(1) == "1"


# A kept function's source, as a program may forge it: ``{run}`` is code that must never run
# when the next program starts.
FORGED_DEFINITIONS: list[tuple[str, str, bool]] = [
    ("annotated argument", "def helper(x: {run}):\n    pass", False),
    ("annotated return", "def helper(x) -> {run}:\n    pass", False),
    ("annotated keyword-only argument", "def helper(*, x: {run}):\n    pass", False),
    ("annotated positional-only argument", "def helper(x: {run}, /):\n    pass", False),
    ("annotated *args", "def helper(*args: {run}):\n    pass", False),
    ("annotated **kwargs", "def helper(**kwargs: {run}):\n    pass", False),
    ("annotated, with a literal default", "def helper(x: {run} = 1):\n    pass", False),
    ("async, annotated", "async def helper(x: {run}):\n    pass", False),
    ("a called lambda as default", "def helper(x=(lambda: {run})()):\n    pass", False),
    ("a default", "def helper(x={run}):\n    pass", False),
    ("a keyword-only default", "def helper(*, x={run}):\n    pass", False),
    ("a decorator", "@{run}\ndef helper():\n    pass", False),
    ("a class", "class helper:\n    x = {run}", False),
    ("an annotated name", "helper: {run} = 1", False),
    ("a second statement", "def helper():\n    pass\n{run}", False),
    ("a def of another name", "def other(x: {run}):\n    pass", False),
    ("not a def at all", "{run}", False),
    # Defined again as written: the inner annotations run only when the program calls it.
    ("annotations inside the body", "def helper():\n    def inner(x: {run}):\n        pass", True),
    ("plain", "def helper(x, y=-2, *, z=None):\n    return x", True),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("source", "restored"),
    [case[1:] for case in FORGED_DEFINITIONS],
    ids=[case[0] for case in FORGED_DEFINITIONS],
)
def test_a_forged_definition_runs_nothing_when_it_is_read_back(
    tmp_path: Path, mode: str, source: str, restored: bool
) -> None:
    forged = source.format(run="ran.append('ran')")

    namespace, reader, ran = _restore(tmp_path / "names", mode, functions={"helper": forged})

    assert ran == []
    assert ("helper" in namespace) is restored, reader.notes
    assert ("helper (its definition is refused here)" in reader.notes) is not restored
    _assert_good_names_back(namespace)


def test_a_definition_comes_back_as_keep_writes_it(tmp_path: Path) -> None:
    source = "def helper(x, y=-2, *, z=None):\n    return x + y"
    defined = kept.top_level_definitions(source)
    assert defined == {"helper": (1, source)}

    namespace, reader, _ = _restore(tmp_path / "names", "full", functions={"helper": source})

    assert (reader.notes, namespace["helper"](3)) == ([], 1)
    assert reader.functions["helper"] == source  # what the next program keeps in turn


_SIZE = (100_000).to_bytes(4, "little")
_ABC = b"\x8c\x03abc"  # SHORT_BINUNICODE "abc"
FORGED_PICKLES: list[tuple[str, bytes]] = [
    ("a list of bytes of a size", b"\x80\x05cbuiltins\nlist\ncbuiltins\nbytes\nJ" + _SIZE + b"\x85R\x85R."),
    ("bytes of a size", b"\x80\x05cbuiltins\nbytes\nJ" + _SIZE + b"\x85R."),
    ("bytes of a size, made new", b"\x80\x05cbuiltins\nbytes\nJ" + _SIZE + b"\x85\x81."),
    ("bytes of a size, protocol 0", b"(I100000\nibuiltins\nbytes\n."),
    ("bytes of a size, protocol 1", b"(cbuiltins\nbytes\nI100000\no."),
    ("a bytearray of a size", b"\x80\x05cbuiltins\nbytearray\nJ" + _SIZE + b"\x85R."),
    ("a string of a list of one value", b"\x80\x05cbuiltins\nstr\n](" + _ABC + b"\x94" + b"h\x00" * 50 + b"e\x85R."),
    ("a tuple made by a call", b"\x80\x05cbuiltins\ntuple\n" + _ABC + b"\x85R."),
    ("a frozenset made by a call", b"\x80\x05cbuiltins\nfrozenset\n" + _ABC + b"\x85R."),
    ("an integer made by a call", b"\x80\x05cbuiltins\nint\n\x8c\x03123\x85R."),
    ("_codecs.encode", b"\x80\x05c_codecs\nencode\n" + _ABC + b"\x8c\x06latin1\x86R."),
    ("a Decimal of an integer", b"\x80\x05cdecimal\nDecimal\nJ" + _SIZE + b"\x85R."),
    ("a defaultdict given its items", b"\x80\x05ccollections\ndefaultdict\ncbuiltins\nlist\n}\x86R."),
    ("a defaultdict of bytes of a size", b"\x80\x05ccollections\ndefaultdict\ncbuiltins\nbytes\nJ" + _SIZE + b"\x85R\x85R."),
    ("a factory alone", b"\x80\x05cbuiltins\nlist\n."),
]  # fmt: skip
"""Pickles a program may put in the file that build more than their bytes, or name a type
where no value is: each is refused, and the other names come back."""


@pytest.mark.parametrize("data", [c[1] for c in FORGED_PICKLES], ids=[c[0] for c in FORGED_PICKLES])
def test_a_pickle_that_builds_more_than_it_holds_is_refused(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(Exception):  # noqa: B017,PT011  (what refuses it varies: a type, a call)
        kept.loads_data(data)

    namespace, reader, _ = _restore(tmp_path / "names", "full", data={"x": data})

    assert "x" not in namespace
    assert "x (its data is refused here)" in reader.notes
    _assert_good_names_back(namespace)


ROUND_TRIPS = [
    1j,
    collections.OrderedDict(a=1, b=[2]),
    collections.Counter("aab"),
    collections.defaultdict(None, {"a": 1}),
    *(collections.defaultdict(kind, {"a": kind()}) for kind in kept_data.BUILTIN_FACTORIES),
    collections.deque([1, 2], maxlen=5),
    datetime.datetime(2026, 12, 3, 10, tzinfo=datetime.timezone(datetime.timedelta(hours=2), "X")),
    datetime.time(1, 2, tzinfo=datetime.UTC),
    {"nested": [collections.defaultdict(list, {"a": [decimal.Decimal("-1.5")]}), (b"x", {1})]},
]


@pytest.mark.parametrize("value", ROUND_TRIPS, ids=lambda v: type(v).__name__)
def test_kept_data_of_every_plain_type_still_comes_back(value: object) -> None:
    assert kept.is_plain(value)
    again = kept.loads_data(pickle.dumps(value, protocol=5))
    assert again == value
    if isinstance(value, collections.defaultdict):
        assert again.default_factory is value.default_factory


NOT_LOADED_MODULES = ["this", "this:s", "json.tool", "json.tool:main"]
"""Entries of modules the next program's process has not loaded: importing them again would
run them there (``this`` prints the Zen)."""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("where", NOT_LOADED_MODULES)
def test_a_module_not_loaded_ahead_is_not_imported_again(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], mode: str, where: str
) -> None:
    module = where.partition(":")[0]
    assert module not in sys.modules  # else importing it would run nothing
    try:
        namespace, reader, _ = _restore(tmp_path / "names", mode, modules={"m": where})
    finally:
        sys.modules.pop(module, None)

    assert "m" not in namespace
    assert capfd.readouterr().out == ""
    assert any(note.startswith(f"m ({where} is not loaded") for note in reader.notes), reader.notes
    _assert_good_names_back(namespace)


# -- In a real kept container ---------------------------------------------------------------

_NAMES = kept.GLOBALS_FILE
# What a forged entry runs, if anything does: it makes the next program answer "forged",
# calls a tool in its name and leaves a mark.
_FORGE = (
    "__import__('builtins').exec("
    + repr(
        textwrap.dedent("""
            import sys
            b = sys.modules['airlock_bridge']
            send = b.Connection.send
            def forging(self, m, send=send):
                if m.get('type') == 'done':
                    m['result']['value'] = 'forged'
                send(self, m)
            b.Connection.send = forging
            tools.records_item_get(record_id='rec_7')
            open('/tmp/ran', 'w').write('ran')
        """)
    )
    + ", {'tools': tools})"
)
_MANY = (60_000_000).to_bytes(4, "little")
_TOO_MANY = (600_000_000).to_bytes(4, "little")
FORGED_ENTRIES: list[tuple[str, dict[str, Any], str]] = [
    *(
        (case[0], {"functions": {"x": case[1].format(run=_FORGE).replace("helper", "x")}}, "definition")
        for case in FORGED_DEFINITIONS
        if not case[2]
    ),
    ("a list of bytes of a size", {"data": {"x": b"\x80\x05cbuiltins\nlist\ncbuiltins\nbytes\nJ" + _MANY + b"\x85R\x85R."}}, "data"),
    ("bytes of a size, made new", {"data": {"x": b"\x80\x05cbuiltins\nbytes\nJ" + _TOO_MANY + b"\x85\x81."}}, "data"),
    ("a bytearray of a size", {"data": {"x": b"\x80\x05cbuiltins\nbytearray\nJ" + _TOO_MANY + b"\x85R."}}, "data"),
    ("a module that prints", {"modules": {"x": "this"}}, "module"),
]  # fmt: skip
"""Entries a first program forges in the file of names, by how each is refused."""

SECOND = textwrap.dedent("""
    import os
    got = tools.records_item_get(record_id="rec_2")["total"]
    [got, os.path.exists("/tmp/ran"), "x" in globals(), n, add([1, 2]), json.dumps(1)]
""")


def _forger(entries: dict[str, Any]) -> str:
    """A first program that writes the good names and ``entries`` where the names wait, and
    patches its process's ``keep`` so that its own names are not written over them."""
    blob = kept_file.encode_names(
        {**GOOD_DATA, **entries.get("data", {})},
        {**GOOD_FUNCTIONS, **entries.get("functions", {})},
        {**GOOD_MODULES, **entries.get("modules", {})},
    )
    return (
        "import sys\nsys.modules['airlock_kept'].KeptGlobals.keep = lambda *args, **kwargs: None\n"
        f"open({_NAMES!r}, 'wb').write({blob!r})\n'first'"
    )


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=RUNTIMES)
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[DockerBackend]:
    async with started_backend(request.param, timeout_s=8.0) as started:
        yield started


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("entries", "kind"), [c[1:] for c in FORGED_ENTRIES], ids=[c[0] for c in FORGED_ENTRIES]
)
async def test_a_forged_entry_runs_nothing_in_the_next_program(
    backend: DockerBackend, entries: dict[str, Any], kind: str
) -> None:
    audit = AuditLog(MemoryAuditStore())
    registry = build_registry(audit=audit)
    kept_sandbox = backend.keep(ALICE, idle_timeout=60)
    try:
        first = await kept_sandbox.run(_forger(entries))
        session = ToolSession(registry=registry, principal=ALICE, grant=GRANT)
        second = await kept_sandbox.run(SECOND, tools=session)
        third = await kept_sandbox.run("[n, add([3]), 'x' in globals()]")
    finally:
        await kept_sandbox.close()

    assert first.status == "ok", first
    # The second program's answer, calls, output and audit records are its own; the good
    # names came back, the forged one did not, and the program is told.
    assert (second.status, second.value) == ("ok", [20, False, False, 7, 3, "1"]), second
    assert (second.tool_calls, second.stdout) == (1, ""), second
    calls = [(e.tool, e.outcome) for e in audit.events(run_id=session.run_id) if e.tool]
    assert calls == [("records_item_get", "ok")], calls
    assert f"x (its {kind} is refused here)" in second.stderr or (
        kind == "module" and "x (this is not loaded" in second.stderr
    ), second.stderr
    # What the second program kept in turn came back to the third, in the same container.
    assert (third.status, third.value) == ("ok", [7, 3, False]), third
    assert kept_sandbox.starts == 1
