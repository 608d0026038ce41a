"""The static check over a table of programs: what resolves, what is unknown, what is not."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from airlock.cli import app
from airlock.inventory import (
    DYNAMIC_CALLS,
    ESCAPE_MODULES,
    INTROSPECTION_ATTRIBUTES,
    REFLECTIVE_NAMES,
    ProgramEffects,
    ProgramSyntaxError,
    check_program,
    load_policy_document,
)
from tests.airlock.inventory_registry import POLICY, POLICY_ARG, REGISTRY_REF, REPO, registry

GET = "billing_invoice_get"
LIST = "billing_invoice_list"
FETCH = "web_page_fetch"
ALICE = load_policy_document(POLICY).principal("alice").principal


def _check(source: str) -> ProgramEffects:
    return check_program(textwrap.dedent(source), registry, ALICE)


# (program, tools it can call, forms seen, unresolved count, unknown names)
PROGRAMS: dict[str, tuple[str, set[str], set[str], int, set[str]]] = {
    "direct call": ('tools.billing_invoice_get(invoice_id="inv_1")', {GET}, {"call"}, 0, set()),
    "alias": (
        """
        get = tools.billing_invoice_get
        get(invoice_id="inv_1")
        """,
        {GET},
        {"alias", "call"},
        0,
        set(),
    ),
    "alias of an alias": (
        """
        get = tools.billing_invoice_get
        fetch_one = get
        fetch_one(invoice_id="inv_1")
        """,
        {GET},
        {"alias", "call"},
        0,
        set(),
    ),
    "namespace alias": (
        "t = tools\nt.billing_invoice_list(customer_id='cus_1')",
        {LIST},
        {"call"},
        0,
        set(),
    ),
    "loop": (
        """
        for i in ["inv_1", "inv_2"]:
            tools.billing_invoice_get(invoice_id=i)
        """,
        {GET},
        {"call"},
        0,
        set(),
    ),
    "comprehension": (
        "[tools.billing_invoice_get(invoice_id=i) for i in ids if i]",
        {GET},
        {"call"},
        0,
        set(),
    ),
    "async gather": (
        """
        import asyncio
        async def main(ids):
            return await asyncio.gather(*(tools.web_page_fetch.aio(path=p) for p in ids))
        """,
        {FETCH},
        {"aio"},
        0,
        set(),
    ),
    "batch": (
        'tools.billing_invoice_get.batch([{"invoice_id": "inv_1"}])',
        {GET},
        {"batch"},
        0,
        set(),
    ),
    "alias batch": (
        "g = tools.billing_invoice_get\ng.batch([])",
        {GET},
        {"alias", "batch"},
        0,
        set(),
    ),
    "nested function and lambda": (
        """
        def outer():
            def inner():
                return tools.billing_invoice_list(customer_id="cus_1")
            return inner()
        pick = lambda i: tools.billing_invoice_get(invoice_id=i)
        """,
        {GET, LIST},
        {"call"},
        0,
        set(),
    ),
    "literal getattr": (
        'getattr(tools, "billing_invoice_get")(invoice_id="inv_1")',
        {GET},
        {"getattr"},
        0,
        set(),
    ),
    "reference in a list": (
        "fs = [tools.billing_invoice_get, tools.web_page_fetch]",
        {GET, FETCH},
        {"reference"},
        0,
        set(),
    ),
    "namespace members are not tools": (
        """
        try:
            tools.log("hello")
        except tools.NotFound:
            pass
        """,
        set(),
        set(),
        0,
        set(),
    ),
    "no tools": ("x = sum(range(10))", set(), set(), 0, set()),
    "computed getattr": (
        'name = "billing_" + "invoice_get"\ngetattr(tools, name)(invoice_id="inv_1")',
        set(),
        set(),
        1,
        set(),
    ),
    "dunder dict": ('tools.__dict__["billing_refund_create"]', set(), set(), 1, set()),
    "private attribute": (
        'tools._connection.submit({"tool": "billing_refund_create"})',
        set(),
        set(),
        1,
        set(),
    ),
    "namespace passed as a value": (
        "def call(ns):\n    return ns.x()\ncall(tools)",
        set(),
        set(),
        1,
        set(),
    ),
    "eval": ('eval("tools.billing_refund_create()")', set(), set(), 1, set()),
    "eval as a value": ('run = eval\nrun("tools.billing_refund_create()")', set(), set(), 1, set()),
    "globals": ('globals()["tools"]', set(), set(), 1, set()),
    "bridge import": ("import airlock_bridge", set(), set(), 1, set()),
    "class attribute alias": (
        "class C:\n    t = tools\nC.t.billing_invoice_list(customer_id='cus_1')",
        set(),
        set(),
        1,
        set(),
    ),
    "named tuple default": (
        """
        from typing import NamedTuple
        class P(NamedTuple):
            t: object = tools
        P().t.billing_invoice_list(customer_id="cus_1")
        """,
        set(),
        set(),
        1,
        set(),
    ),
    "string annotation that calls": (
        "def f(x: 'tools.billing_invoice_list(customer_id=\"cus_1\")'): pass",
        set(),
        set(),
        1,
        set(),
    ),
    "string annotation naming an alias": ("t = tools\ndef f(x: 't'): pass", set(), set(), 1, set()),
    "string annotations that are types": (
        "def f(x: 'int', y: 'list[str] | None', z: 'typing.Any') -> 'dict[str, int]': pass",
        set(),
        set(),
        0,
        set(),
    ),
    "a tool in an annotation": (
        "def f(x: tools.billing_invoice_get) -> None: pass",
        {GET},
        {"reference"},
        0,
        set(),
    ),
    "private attribute of a listed tool": (
        "fs = [tools.billing_invoice_get]\nfs[0]._connection.submit({})",
        {GET},
        {"reference"},
        1,
        set(),
    ),
    "generator frame": (
        "g = (x for x in [1])\ng.gi_frame.f_globals['tools']",
        set(),
        set(),
        2,
        set(),
    ),
    "module reached through another": (
        "import asyncio\nasyncio.base_events.sys.modules",
        set(),
        set(),
        1,
        set(),
    ),
    "module imported from another": (
        "from asyncio.base_events import sys",
        set(),
        set(),
        1,
        set(),
    ),
    "star import": ("from asyncio.base_events import *", set(), set(), 1, set()),
    "computed getattr on anything": ("getattr(row, name)", set(), set(), 1, set()),
    "literal getattr of a harmless name": ("getattr(row, 'total')", set(), set(), 0, set()),
    "literal getattr of a frame": ("getattr(g, 'gi_frame')", set(), set(), 1, set()),
    "open of a descriptor": ("open(3, 'wb')", set(), set(), 1, set()),
    "open of a literal path": ("open('/tmp/data.csv').read()", set(), set(), 0, set()),
    "class pattern reading a frame": (
        "match g:\n    case object(gi_frame=f):\n        pass",
        set(),
        set(),
        1,
        set(),
    ),
    "named tuple methods": (
        "from collections import namedtuple\nP = namedtuple('P', 'a b')\nP(1, 2)._asdict()",
        set(),
        set(),
        0,
        set(),
    ),
    "pickle": ("import pickle\npickle.loads(data)", set(), set(), 1, set()),
    "a private module": ("import _posixsubprocess", set(), set(), 1, set()),
    "a descriptor written by number": ("import posix\nposix.write(3, b'')", set(), set(), 1, set()),
    "a descriptor opened by codecs": (
        "import codecs\ncodecs.open(3, 'wb')",
        set(),
        set(),
        1,
        set(),
    ),
    "write tool is unknown from code": (
        'tools.billing_refund_create(invoice_id="inv_1", amount_minor=5)',
        set(),
        set(),
        0,
        {"billing_refund_create"},
    ),
    "hidden tool is unknown": (
        'tools.crm_customer_get(customer_id="cus_1")',
        set(),
        set(),
        0,
        {"crm_customer_get"},
    ),
    # Too deep for the parser (RecursionError, then MemoryError): no syntax error, since an
    # interpreter with other limits may still run it.
    "nested too deeply": ("x = " + "-" * 5_000 + "1", set(), set(), 1, set()),
    "nested too deeply for memory": ("x = " + "-" * 50_000 + "1", set(), set(), 1, set()),
    "a string annotation nested too deeply": (
        'x: "' + "-" * 5_000 + '1" = 1\ntools.billing_invoice_get(invoice_id="inv_1")',
        set(),
        set(),
        1,
        set(),
    ),
    "misspelled tool is unknown": (
        "tools.billing_invoice_gte()",
        set(),
        set(),
        0,
        {"billing_invoice_gte"},
    ),
}


@pytest.mark.parametrize("case", sorted(PROGRAMS))
def test_program_table(case: str) -> None:
    source, tools, forms, unresolved, unknown = PROGRAMS[case]
    report = _check(source)
    assert set(report.tools) == tools
    assert {use.form for use in report.uses} == forms
    assert len(report.unresolved) == unresolved, report.unresolved
    assert {u.name for u in report.unknown} == unknown
    assert report.complete == (not unresolved and not unknown)
    expected = "unresolved" if unresolved else ("unknown_tools" if unknown else "complete")
    assert report.verdict == expected


# Every form of import of every module on the escape list (and of a submodule) is reported.
ESCAPE_IMPORTS = [
    pytest.param(form.format(module=module), module, id=f"{module}-{kind}")
    for module in sorted(ESCAPE_MODULES)
    for kind, form in {
        "import": "import {module}",
        "import-as": "import {module} as m",
        "from": "from {module} import x",
        "submodule": "import {module}.sub",
        "from-submodule": "from {module}.sub import x",
        "among-others": "import json, {module}",
    }.items()
]


@pytest.mark.parametrize(("source", "module"), ESCAPE_IMPORTS)
def test_every_escape_import_is_unresolved(source: str, module: str) -> None:
    report = _check(source)
    assert len(report.unresolved) == 1, report.unresolved
    assert f"import of {module}" in report.unresolved[0].reason.replace("'", "")
    assert not report.complete


@pytest.mark.parametrize("name", sorted(DYNAMIC_CALLS))
def test_every_dynamic_call_is_unresolved(name: str) -> None:
    # One argument that is not a literal path or name: no exception applies.
    report = _check(f"{name}(text)")
    assert len(report.unresolved) == 1, report.unresolved
    assert report.verdict == "unresolved"


@pytest.mark.parametrize("name", sorted(DYNAMIC_CALLS))
def test_every_dynamic_builtin_taken_as_a_value_is_unresolved(name: str) -> None:
    report = _check(f"run = [{name}]")
    assert [u.reason for u in report.unresolved] == [
        f"{name} used as a value can run code or fetch any attribute"
    ]


@pytest.mark.parametrize("attribute", sorted(INTROSPECTION_ATTRIBUTES | REFLECTIVE_NAMES))
@pytest.mark.parametrize(
    "form",
    [
        "x.{a}",
        "getattr(x, '{a}')",
        "from m import {a}",
        "match x:\n    case object({a}=y):\n        pass",
    ],
)
def test_every_introspection_and_reflective_name_is_unresolved(form: str, attribute: str) -> None:
    report = _check(form.format(a=attribute))
    assert len(report.unresolved) == 1, report.unresolved
    assert attribute in report.unresolved[0].reason


@pytest.mark.parametrize("module", sorted(ESCAPE_MODULES))
def test_every_escape_module_reached_as_an_attribute_is_unresolved(module: str) -> None:
    report = _check(f"import json\njson.{module}")
    assert len(report.unresolved) == 1, report.unresolved
    assert not report.complete


@pytest.mark.parametrize(
    "source",
    [
        "import json",
        "from collections import Counter",
        "import osmosis",
        "import system",
        "import typing\nx: typing.Optional[int] = None",
    ],
)
def test_modules_off_the_escape_list_are_not_reported(source: str) -> None:
    assert _check(source).unresolved == ()


def test_effects_are_those_of_the_resolved_tools() -> None:
    report = _check('tools.billing_invoice_get(invoice_id="inv_1")')
    assert report.effects == ("network(api.billing.example)", "read(billing:invoice/{invoice_id})")
    assert report.may_reach == report.effects


def test_an_unresolved_call_may_reach_everything_callable_from_code() -> None:
    report = _check("getattr(tools, name)()")
    assert report.tools == ()
    assert "read(web:page/*)" in report.may_reach
    assert not [e for e in report.may_reach if e.startswith(("write", "spend"))]
    assert report.unresolved[0].source == "getattr(tools, name)"
    assert report.unresolved[0].line == 1


def test_unknown_names_say_why() -> None:
    reasons = {
        u.name: u.reason for u in _check(PROGRAMS["write tool is unknown from code"][0]).unknown
    }
    assert "direct only" in reasons["billing_refund_create"]


def test_alias_calls_name_the_alias() -> None:
    uses = _check(PROGRAMS["alias"][0]).uses
    assert [(u.line, u.form, u.via) for u in uses] == [(2, "alias", None), (3, "call", "get")]


def test_a_syntax_error_is_a_usage_error() -> None:
    with pytest.raises(ProgramSyntaxError) as info:
        _check("def broken(:\n")
    assert info.value.code == "program_syntax"
    assert info.value.line == 1


@pytest.mark.parametrize(
    "case",
    ["nested too deeply", "nested too deeply for memory", "a string annotation nested too deeply"],
)
def test_program_effects_exits_unresolved_on_a_program_nested_too_deeply(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    program = tmp_path / "deep.py"
    program.write_text(PROGRAMS[case][0])
    args = ["program-effects", str(program), "--registry", REGISTRY_REF, "--policy", POLICY_ARG]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 3, result.output
    assert "nests too deeply" in result.output
