"""Restricted mode's classes: what would hold were a program to reach ``type`` anyway.

:mod:`tests.sandbox.test_restricted_guard` shows that a program reaches no metaclass. Behind
that, the dataclasses stand-in, the class statement's ``__build_class__``, ``setattr`` and the
write guard each refuse what a class of any namespace would do: these run the programs of the
former routes with ``T`` given as ``type``, and the guest's functions directly.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from tests.sandbox.guest_image import load_guest
from tests.sandbox.restricted_escapes import PROGRAMS
from tests.sandbox.test_guest_runner import ALLOWED

language = load_guest("airlock_language")
classes = load_guest("airlock_language_classes")
guard = load_guest("airlock_language_guard")
stand_in = load_guest("airlock_language_dataclasses")

_GET_TYPE = "T = typing.get_origin(typing.Type[int])\n"

# (route, program whose ``T`` is ``type``, error type, a phrase of the message)
DEPTH: list[tuple[str, str, str, str]] = [
    ("type_call_dataclass", "import typing, dataclasses\n"
     "evil = \"a,self.a.append(__import__('os').getpid())\"\n"
     "C = T('C', (), {'__annotations__': {evil: int}, 'a': []})\n"
     "x = dataclasses.dataclass(init=False, repr=False)(C)()\nx == x\nx.a\n",
     "ValueError", "not an identifier"),
    ("type_call_dataclass_decorator_form", "import typing\nfrom dataclasses import dataclass\n"
     "C = T('C', (), {'__annotations__': {\"b=exec('import os')):#\": int}})\n"
     "dataclass(C)\n", "ValueError", "not an identifier"),
    ("type_call_dataclass_dunder_field", "import typing, dataclasses\n"
     "dataclasses.dataclass(T('C', (), {'__annotations__': {'__globals__': int}}))\n",
     "ValueError", "starts with '_'"),
    ("type_call_dataclass_str_subclass_field", "import typing, dataclasses\n"
     "K = T('K', (str,), {'__format__': lambda s, spec: \"a,self.a.append(__import__('os').getpid())\"})\n"
     "C = T('C', (), {'__annotations__': {K('b'): int}, 'a': []})\n"
     "x = dataclasses.dataclass(init=False, repr=False)(C)()\nx == x\nx.a\n",
     "ValueError", "not a plain string"),
    ("type_call_dataclass_annotations_mapping", "import typing, dataclasses\n"
     "A = T('A', (dict,), {})\n"
     "dataclasses.dataclass(T('C', (), {'__annotations__': A(a=int)}))\n",
     "TypeError", "not a dict"),
    ("dataclass_forged_base_fields", "import typing, dataclasses\n"
     "F = T('F', (), {'name': \"a=__import__('os').getpid()\", 'default': dataclasses.MISSING,"
     " 'default_factory': dataclasses.MISSING, 'init': True, 'repr': True, 'compare': True,"
     " 'kw_only': False, 'type': int})\n"
     "B = T('B', (), {'__dataclass_fields__': {'a': F()},"
     " '__dataclass_params__': dataclasses.make_dataclass('Q', ['frozen'])(False)})\n"
     "dataclasses.dataclass(T('C', (B,), {}))().a\n",
     "TypeError", "restricted mode did not make"),
    ("make_dataclass_forged_base_fields", "import typing, dataclasses\n"
     "B = T('B', (), {'__dataclass_fields__': {}})\n"
     "dataclasses.make_dataclass('W', ['x'], bases=(B,))\n",
     "TypeError", "restricted mode did not make"),
    ("dataclass_of_a_metaclass", "import dataclasses\n"
     "dataclasses.dataclass(T('M', (T,), {}))\n", "TypeError", "is a metaclass"),
    ("make_dataclass_metaclass_base", "import dataclasses\n"
     "dataclasses.make_dataclass('M', [], bases=(T,), init=False)\n",
     "TypeError", "is a metaclass"),
    ("class_statement_type_base", "class M(T):\n    pass\n", "TypeError", "is a metaclass"),
    # The hook writes with setattr, which trusts no object's ``_guarded_writes`` now.
    ("init_subclass_annotations_escape",
     PROGRAMS["init_subclass_annotations_escape"].replace(_GET_TYPE, ""),
     "TypeError", "writes no attribute"),
]  # fmt: skip


def _run_with_type(program: str) -> BaseException | None:
    body, last = language.compile_program(program, "restricted", ALLOWED)
    namespace = language.restricted_globals(ALLOWED, lambda value: None, tools=None)
    namespace["T"] = type
    try:
        language.run_program(body, last, namespace, lambda value: None, lambda: False)
    except Exception as exc:
        return exc
    return None


@pytest.mark.parametrize(
    ("route", "program", "error", "phrase"), DEPTH, ids=[row[0] for row in DEPTH]
)
def test_a_class_of_any_namespace_is_refused_where_it_is_used(
    route: str, program: str, error: str, phrase: str
) -> None:
    refused = _run_with_type(program)
    assert type(refused).__name__ == error, (route, refused)
    assert phrase in str(refused), refused


def test_a_base_hook_cannot_swap_the_annotations_make_dataclass_checked() -> None:
    def hook(cls: type, **kw: Any) -> None:
        type.__setattr__(cls, "__annotations__", {"x-y": int})

    base = type("B", (), {"__init_subclass__": classmethod(hook)})
    with pytest.raises(ValueError, match="not an identifier"):
        stand_in.make_dataclass("D", ["x"], bases=(base,))


@pytest.mark.parametrize("name", ["__reduce_ex__", "__init_subclass__", "_guarded_writes"])
def test_a_class_body_defines_no_other_underscore_name(name: str) -> None:
    source = f"class E:\n    {name} = len\n    __init__ = len\n    _ = 1\n    k = 2\n"
    allowed = {"__build_class__": classes.build_class, "len": len}
    exec(source.replace(f"    {name} = len\n", ""), {"__builtins__": allowed, "__name__": "p"})
    with pytest.raises(TypeError, match=f"would define '{name}'"):
        exec(source, {"__builtins__": allowed, "__name__": "p"})


def test_get_args_hands_out_no_metaclass() -> None:
    assert classes.get_args(dict[str, int]) == (str, int)
    with pytest.raises(TypeError, match="the metaclass 'type'"):
        classes.get_args(type[type])


def test_the_write_guard_trusts_no_object_s_own_say() -> None:
    write_guard, guarded_setattr, _ = classes.write_guards("p")
    trusting = type("Trusting", (), {"_guarded_writes": 1})()
    with pytest.raises(TypeError, match="writes no attribute"):
        write_guard(trusting)
    with pytest.raises(TypeError, match="writes no attribute"):
        guarded_setattr(trusting, "a", 1)
    mine = type("Mine", (), {"__module__": "p"})()
    guarded_setattr(mine, "a", 1)
    assert mine.a == 1
    with pytest.raises(AttributeError, match="starts with '_'"):
        guarded_setattr(mine, "_a", 1)


def test_the_table_follows_a_module_replaced_at_the_same_count() -> None:
    import string

    assert guard.refusal(string.Formatter, frozenset())
    replacement = types.ModuleType("string")
    replacement.Formatter = type("Formatter", (), {})  # type: ignore[attr-defined]
    sys.modules["string"] = replacement
    try:
        assert guard.refusal(replacement.Formatter, frozenset())  # type: ignore[attr-defined]
    finally:
        sys.modules["string"] = string
    assert guard.refusal(string.Formatter, frozenset())
