"""Programs that try to call a tool the static check cannot see, each checked statically and
then run for real in the sandbox (restricted and full mode) with tools that record every call:
whenever the check says ``complete``, what ran is among the tools it listed."""

from __future__ import annotations

import textwrap
from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from airlock.bridge import ToolSession
from airlock.inventory import check_program
from airlock.inventory._static_handoff import TRUSTED_CALLS
from airlock.inventory._static_rules import MATCH_PROTOCOL
from airlock.policies import Grant, LanguageMode, Principal, read
from airlock.tools import AuditLog, MemoryAuditStore, Registry
from tests.conftest import Sandbox

ITEM = "records_item_get"
SECRET = "records_secret_get"
PRINCIPAL = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"records.read"}))
GRANT = Grant(scopes=frozenset({"records.read"}), effects=(read("records:**"),))
RecordId = Annotated[str, Field(pattern=r"^rec_[0-9]{1,6}$", max_length=12)]
CALL = 'c.wait(c.submit({"type": "call", "tool": "records_secret_get", "args": {"record_id": "rec_1"}}))'


class Record(BaseModel):
    record_id: str


def recording_registry(called: list[str]) -> Registry:
    """Two reads callable from code; each appends its name to ``called`` when it runs."""
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("records:item/{record_id}")], scope="records.read",
                   callers={"direct", "code"})  # fmt: skip
    def records_item_get(record_id: RecordId) -> Record:
        """Fetch one record. Use it to read a record. It does not return secrets."""
        called.append(ITEM)
        return Record(record_id=record_id)

    @registry.tool(effects=[read("records:secret/{record_id}")], scope="records.read",
                   callers={"direct", "code"})  # fmt: skip
    def records_secret_get(record_id: RecordId) -> Record:
        """Fetch one secret record. Use it rarely. It does not return anything else."""
        called.append(SECRET)
        return Record(record_id=record_id)

    return registry


# A class whose metaclass keeps what isinstance() or issubclass() hands it.
KEEPER = """
        class Meta(type):
            def __instancecheck__(cls, obj):
                cls.ns = obj
                return True
            def __subclasscheck__(cls, obj):
                cls.ns = obj
                return True
        class Grab(metaclass=Meta):
            pass
"""


# name: (program, the tools it calls when run in full mode)
EVASIONS: dict[str, tuple[str, set[str]]] = {
    "a plain call": ('tools.records_item_get(record_id="rec_1")', {ITEM}),
    "an alias in a loop": (
        """
        get = tools.records_item_get
        [get(record_id=f"rec_{n}") for n in range(3)]
        """,
        {ITEM},
    ),
    "a class attribute aliasing tools": (
        """
        class Box:
            t = tools
        Box.t.records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "a NamedTuple default holding tools": (
        """
        from typing import NamedTuple
        class Box(NamedTuple):
            t: object = tools
        Box().t.records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "a class attribute reached through self": (
        """
        class Box:
            t = tools
            def call(self):
                return self.t.records_secret_get(record_id="rec_1")
        Box().call()
        """,
        {SECRET},
    ),
    "a string annotation evaluated by get_type_hints": (
        """
        import typing
        def f(x: "tools.records_secret_get(record_id='rec_1')"):
            pass
        try:
            typing.get_type_hints(f)
        except TypeError:
            pass
        """,
        {SECRET},
    ),
    "pickle calling eval": (
        """
        import pickle
        payload = b"cbuiltins\\neval\\n(Vtools.records_secret_get(record_id='rec_1')\\ntR."
        pickle.loads(payload)
        """,
        {SECRET},
    ),
    "eval taken as a value": (
        """
        run = eval
        run("tools.records_secret_get(record_id='rec_1')")
        """,
        {SECRET},
    ),
    "a generator's frame": (
        """
        g = (x for x in [1])
        g.gi_frame.f_globals["tools"].records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "a frame through another module's sys": (
        """
        import asyncio
        frame = asyncio.base_events.sys._getframe(0)
        frame.f_globals["tools"].records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "attrgetter by dotted text": (
        """
        import asyncio, operator
        frame = operator.attrgetter("base_events.sys._getframe")(asyncio)(0)
        operator.attrgetter("f_globals")(frame)["tools"].records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "a computed getattr on a generator": (
        """
        g = (x for x in [1])
        frame = getattr(g, "gi_" + "frame")
        getattr(frame, "f_" + "globals")["tools"].records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "a class pattern reading a frame": (
        """
        g = (x for x in [1])
        match g:
            case object(gi_frame=frame):
                frame.f_globals["tools"].records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    # A positional sub-pattern reads the attribute its class's __match_args__ names.
    "a class pattern whose __match_args__ names __globals__ and a tool": (
        """
        class Meta(type):
            def __instancecheck__(cls, obj):
                return True
        class Globals(metaclass=Meta):
            __match_args__ = ("__globals__",)
        class Pick(metaclass=Meta):
            __match_args__ = ("records_" + "secret_get",)
        def here():
            pass
        match here:
            case Globals(g):
                namespace = g["to" + "ols"]
        match namespace:
            case Pick(fn):
                fn(record_id="rec_1")
        """,
        {SECRET},
    ),
    "a class pattern of a class type() builds": (
        """
        Meta = type("Meta", (type,), {"_" + "_instancecheck__": lambda cls, obj: True})
        Globals = Meta("Globals", (), {"_" + "_match_args__": ("_" + "_globals__",)})
        def here():
            pass
        match here:
            case Globals(g):
                g["tools"].records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "a built-in type's name the program rebinds in a class pattern": (
        """
        Meta = type("Meta", (type,), {"_" + "_instancecheck__": lambda cls, obj: True})
        str = Meta("str", (), {"_" + "_match_args__": ("_" + "_globals__",)})
        def here():
            pass
        match here:
            case str(g):
                g["tools"].records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "the bridge behind a listed tool": (
        f"""
        fs = [tools.records_item_get]
        c = fs[0]._connection
        {CALL}
        """,
        {SECRET},
    ),
    "a tool passed as self": (
        f"""
        class Box:
            def conn(self):
                return self._connection
        c = Box.conn(tools.records_item_get)
        {CALL}
        """,
        {SECRET},
    ),
    "a listed tool renamed": (
        """
        fs = [tools.records_item_get]
        try:
            fs[0].name = "records_secret_get"  # read-only: it stays the tool the check saw
        except AttributeError:
            pass
        fs[0](record_id="rec_1")
        """,
        {ITEM},
    ),
    "the private name of a listed tool set": (
        """
        fs = [tools.records_item_get]
        setattr(fs[0], "_tool", "records_secret_get")
        fs[0](record_id="rec_1")
        """,
        {SECRET},
    ),
    "a default argument holding tools": (
        """
        def f(t=tools):
            return t.records_secret_get(record_id="rec_1")
        f()
        """,
        {SECRET},
    ),
    # The namespace handed to code that can keep it: each keeps it, then calls through it.
    "setattr storing tools on an object": (
        """
        class Box:
            pass
        b = Box()
        setattr(b, "ns", tools)
        b.ns.records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "setattr storing an alias of tools": (
        """
        class Box:
            pass
        b = Box()
        t = tools
        setattr(b, "ns", t)
        b.ns.records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "object.__setattr__ storing tools": (
        """
        class Box:
            pass
        b = Box()
        object.__setattr__(b, "ns", tools)
        b.ns.records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "vars(x).update storing tools": (
        """
        class Box:
            pass
        b = Box()
        vars(b).update(ns=tools)
        b.ns.records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "isinstance handing tools to a metaclass": (
        f"""
        {KEEPER}
        isinstance(tools, Grab)
        Grab.ns.records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "isinstance handing an alias of tools to a metaclass": (
        f"""
        {KEEPER}
        t = tools
        isinstance(t, (int, Grab))
        Grab.ns.records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "isinstance against a builtin name the program rebinds": (
        f"""
        {KEEPER}
        str = Grab
        isinstance(tools, str)
        Grab.ns.records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "issubclass handing tools to a metaclass": (
        f"""
        {KEEPER}
        issubclass(tools, Grab)
        Grab.ns.records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "issubclass of the namespace's type": (
        f"""
        {KEEPER}
        issubclass(type(tools), Grab)
        tools.records_item_get(record_id="rec_1")
        """,
        {ITEM},
    ),
    "an augmented assignment handing tools to __radd__": (
        """
        class Grab:
            def __radd__(self, other):
                Grab.ns = other
                return other
        t = tools
        t += Grab()
        Grab.ns.records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "a lambda default holding tools": (
        """
        get_ns = lambda t=tools: t
        get_ns().records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "tools stored in a list": (
        """
        held = [tools]
        held[0].records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "tools appended to a list": (
        """
        held = []
        held.append(tools)
        held[0].records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "a generator yielding tools": (
        """
        def each():
            yield tools
        next(each()).records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "a print the program rebinds": (
        """
        def print(value):
            global held
            held = value
        print(tools)
        held.records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "a getattr the program rebinds": (
        """
        held = []
        def getattr(obj, name):
            held.append(obj)
        getattr(tools, "records_item_get")
        held[0].records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    # Ordinary programs the check follows: each stays complete.
    "a global alias of tools": (
        """
        def keep():
            global held
            held = tools
        keep()
        held.records_secret_get(record_id="rec_1")
        """,
        {SECRET},
    ),
    "results used as plain values": (
        """
        class Seen:
            pass
        rows = [tools.records_item_get(record_id=f"rec_{n}") for n in range(2)]
        for row in rows:
            if isinstance(row, (dict, Seen)) or not isinstance(row, Seen):
                print(len(rows), str(row), repr(row))
        """,
        {ITEM},
    ),
    "results matched against built-in types": (
        """
        row = tools.records_item_get(record_id="rec_1")
        match row:
            case dict(d) | list(d):
                print(d)
            case str(text) | int(text) | bool(text):
                print(text)
            case object(record_id=record):
                print(record)
        """,
        {ITEM},
    ),
    "tools given to built-ins that cannot keep it": (
        f"""
        print(tools, str(tools), repr(tools), dir(tools), hasattr(tools, "{ITEM}"))
        if isinstance(tools, (object, int)):
            tools.{ITEM}(record_id="rec_1")
        """,
        {ITEM},
    ),
}


@pytest.mark.parametrize("case", sorted(EVASIONS))
def test_the_static_verdict_of_each_evasion(case: str) -> None:
    source, ran = EVASIONS[case]
    report = check_program(textwrap.dedent(source), recording_registry([]), PRINCIPAL)
    # A program the check calls complete must list what it runs; every evasion that runs a
    # tool it does not name is unresolved.
    if report.verdict == "complete":
        assert ran <= set(report.tools), report
    else:
        assert report.verdict == "unresolved", report
    complete = {
        "a global alias of tools",
        "a listed tool renamed",
        "a plain call",
        "an alias in a loop",
        "results matched against built-in types",
        "results used as plain values",
        "tools given to built-ins that cannot keep it",
    }
    assert (report.verdict == "complete") == (case in complete)


# A tool sends the name it holds: a program that changes a tool object calls what the check
# cannot name. name: (program, the line the check names as unresolved)
TOOL_CHANGES: dict[str, tuple[str, int]] = {
    "an alias renamed": (
        f"""
        f = tools.{ITEM}
        f.name = "{SECRET}"
        f(record_id="rec_1")
        """,
        3,
    ),
    "a tool renamed in place": (
        f'tools.{ITEM}.name = "{SECRET}"\ntools.{ITEM}(record_id="rec_1")',
        1,
    ),
    "a literal getattr renamed": (
        f'getattr(tools, "{ITEM}").name = "{SECRET}"\ntools.{ITEM}(record_id="rec_1")',
        1,
    ),
    "a renamed augmented": (
        f'f = tools.{ITEM}\nf.name = "records_"\nf.name += "secret_get"\nf(record_id="rec_1")',
        2,
    ),
    "a rename as a loop target": (
        f'f = tools.{ITEM}\nfor f.name in ["{SECRET}"]:\n    f(record_id="rec_1")',
        2,
    ),
    "setattr on an alias": (
        f'f = tools.{ITEM}\nsetattr(f, "name", "{SECRET}")\nf(record_id="rec_1")',
        2,
    ),
    "setattr on the namespace's tool": (
        f'setattr(tools.{ITEM}, "name", "{SECRET}")\ntools.{ITEM}(record_id="rec_1")',
        1,
    ),
    "setattr taken as a value": (
        f'f = tools.{ITEM}\nset_it = setattr\nset_it(f, "name", "{SECRET}")\nf(record_id="rec_1")',
        2,
    ),
    "setattr on unseen arguments": (
        f'f = tools.{ITEM}\nsetattr(*[f, "name", "{SECRET}"])\nf(record_id="rec_1")',
        2,
    ),
    "a tool of the namespace replaced": (
        f"t = tools\nt.{ITEM} = t.{SECRET}\ntools.{ITEM}(record_id='rec_1')",
        2,
    ),
    "a proposal renamed": (
        f'tools.propose.{ITEM}.name = "{SECRET}"',
        1,
    ),
    "setattr of a private name on a listed tool": (
        f'fs = [tools.{ITEM}]\nsetattr(fs[0], "_tool", "{SECRET}")\nfs[0](record_id="rec_1")',
        2,
    ),
    "setattr of a computed name on a listed tool": (
        f'fs = [tools.{ITEM}]\nn = "_to" + "ol"\nsetattr(fs[0], n, "{SECRET}")',
        3,
    ),
    "delattr of a private name": ('fs = [tools.records_item_get]\ndelattr(fs[0], "_tool")', 2),
    "a tool's attribute deleted": (f"f = tools.{ITEM}\ndel f.name", 2),
    "delattr on a tool": (f'delattr(tools.{ITEM}, "name")', 1),
}


@pytest.mark.parametrize("case", sorted(TOOL_CHANGES))
def test_a_change_to_a_tool_object_is_unresolved(case: str) -> None:
    source, line = TOOL_CHANGES[case]
    report = check_program(textwrap.dedent(source), recording_registry([]), PRINCIPAL)
    assert report.verdict == "unresolved", report
    assert line in {u.line for u in report.unresolved}, report.unresolved


@pytest.mark.parametrize("name", sorted(TRUSTED_CALLS))
def test_a_trusted_builtin_the_program_rebinds_cannot_take_tools(name: str) -> None:
    # The program's own function of that name would receive the namespace and could keep it.
    source = f"""
    held = []
    def {name}(*args):
        held.append(args[0])
    {name}(tools, int)
    held[0].{SECRET}(record_id="rec_1")
    """
    report = check_program(textwrap.dedent(source), recording_registry([]), PRINCIPAL)
    assert report.verdict == "unresolved", report
    assert any("the program binds" in u.reason for u in report.unresolved), report.unresolved


# How a program can bind a name: each form, for each name of MATCH_PROTOCOL.
BINDINGS: dict[str, str] = {
    "class attribute": "class C:\n    {name} = ()",
    "method": "class C(type):\n    def {name}(cls, obj):\n        return True",
    "assignment": "{name} = ()",
    "import as": "from math import pi as {name}",
    "loop target": "for {name} in [()]:\n    pass",
}


@pytest.mark.parametrize("form", sorted(BINDINGS))
@pytest.mark.parametrize("name", sorted(MATCH_PROTOCOL))
def test_binding_a_name_that_drives_class_patterns_is_unresolved(name: str, form: str) -> None:
    source = BINDINGS[form].format(name=name) + f"\ntools.{ITEM}(record_id='rec_1')\n"
    report = check_program(source, recording_registry([]), PRINCIPAL)
    assert report.verdict == "unresolved", report
    assert any(f"binding {name}" in u.reason for u in report.unresolved), report.unresolved


def test_a_class_with_ordinary_dunders_stays_complete() -> None:
    source = f"""
    class Row:
        __slots__ = ("value",)
        def __init__(self, value):
            self.value = value
        def __eq__(self, other):
            return isinstance(other, Row) and other.value == self.value
    match Row(tools.{ITEM}(record_id="rec_1")):
        case Row(value=found):
            print(found)
    """
    report = check_program(textwrap.dedent(source), recording_registry([]), PRINCIPAL)
    assert report.verdict == "complete", report.unresolved


def test_attributes_of_other_objects_may_be_set() -> None:
    source = f"""
    class Row:
        pass
    row = Row()
    row.name = "x"
    setattr(row, "total", 1)
    tools.{ITEM}(record_id="rec_1")
    """
    report = check_program(textwrap.dedent(source), recording_registry([]), PRINCIPAL)
    assert report.verdict == "complete", report.unresolved


@pytest.mark.docker
@pytest.mark.parametrize("mode", ["full", "restricted"])
@pytest.mark.parametrize("case", sorted(EVASIONS))
def test_static_covers_runtime_whenever_complete(
    sandbox: Sandbox, case: str, mode: LanguageMode
) -> None:
    source, expected = EVASIONS[case]
    program = textwrap.dedent(source)
    called: list[str] = []
    tools = ToolSession(registry=recording_registry(called), principal=PRINCIPAL, grant=GRANT)
    result = sandbox.run(program, tools=tools, language_mode=mode)
    report = check_program(program, recording_registry([]), PRINCIPAL)
    if report.verdict == "complete":
        assert set(called) <= set(report.tools), (report, called)
    if mode == "full":
        # The route is real: in plain Python the program reaches the tool it did not name.
        assert set(called) == expected, (result.error, called)
