"""Restricted mode is a guard: the known routes from a restricted program to a module, a frame,
a module's globals, a file or a callable that gets around the guards, each refused with the
guard's error.

Each program, if its route were open, would end with a value that proves the crossing (a pid
from ``os``, a module, a frame's globals). The table is run by the real runner as a host
process (fast); container runs of some rows (:data:`IMAGE_ROUTES`) check that the image ships
the same guard. The container stays the boundary: this is defence in depth.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import Sandbox
from tests.sandbox.guest_image import load_guest
from tests.sandbox.restricted_escapes import PROGRAMS
from tests.sandbox.test_guest_runner import ALLOWED, run_in_process

language = load_guest("airlock_language")
guard = load_guest("airlock_language_guard")
copying = load_guest("airlock_language_copy")

ENUM_ESCAPE = """
import re, dataclasses, json
E = [c for c in re.RegexFlag.mro() if str(c) == "<enum 'Enum'>"][0]
D = dataclasses.make_dataclass('D', ['x'])
def write(target, attrs):
    def pick():
        return target
    def red(self, proto):
        return (pick, (), (None, attrs))
    X = E('X', [('__reduce_ex__', red), ('__deepcopy__', None), ('a', 1)])
    dataclasses.asdict(D(X.a))
box = {}
def spy(name, args, body, **kw):
    box['g'] = kw.get('globals')
    raise LookupError('captured')
class C:
    pass
write(dataclasses, {'_create_fn': spy})
write(C, {'__module__': 'json', '__annotations__': {'x': int}})
try:
    dataclasses.dataclass(C)
except LookupError:
    pass
real = dict.get(box.get('g'), '__builtins__')
out = {}
dict.get(real, 'exec')("import os\\nout['pid'] = os.getpid()\\n"
    "out['passwd'] = open('/etc/passwd').read()[:40]", {'out': out, '__builtins__': real})
out
"""
"""A reviewer's escape: ``enum.Enum`` from ``type.mro``, a class of its functional API with a
``__reduce_ex__`` whose state ``copy`` wrote onto ``dataclasses`` and onto a class, and so
the real builtins."""

# (route, program, error type, a phrase of the message). "invalid_program": refused before
# running, by RestrictedPython's compiler.
BYPASSES: list[tuple[str, str, str, str]] = [
    ("typing_sys_modules", "import typing\ntyping.sys.modules['os'].getpid()\n",
     "AttributeError", "the module 'sys'"),
    ("statistics_sys", "import statistics\nstatistics.sys.modules\n",
     "AttributeError", "the module 'sys'"),
    ("from_typing_import_sys", "from typing import sys\nsys.modules['os'].getpid()\n",
     "ImportError", "the module 'sys'"),
    ("getattr_module", "import typing\ngetattr(typing, 'sys').modules\n",
     "AttributeError", "the module 'sys'"),
    ("getattr_with_default", "import typing\ngetattr(typing, 'sys', None).modules\n",
     "AttributeError", "the module 'sys'"),
    ("dir_walk", "import datetime\n[getattr(datetime, n) for n in dir(datetime) if n == 'sys']\n",
     "AttributeError", "the module 'sys'"),
    ("re_enum", "import re\nre.enum.sys\n", "AttributeError", "the module 'enum'"),
    # Refused at asyncio's submodule, which the program may not hold either.
    ("asyncio_os", "import asyncio\nasyncio.base_events.os.getpid()\n",
     "AttributeError", "the module 'asyncio.base_events'"),
    ("asyncio_subprocess_module", "import asyncio\nasyncio.subprocess.subprocess\n",
     "AttributeError", "the module 'asyncio.subprocess'"),
    ("dataclasses_builtins", "import dataclasses\ndataclasses.builtins.open\n",
     "AttributeError", "the module 'builtins'"),
    ("typing_types", "import typing\ntyping.types.FunctionType\n",
     "AttributeError", "the module 'types'"),
    ("get_type_hints", "import typing, dataclasses\n"
     "C = dataclasses.make_dataclass('C', [('a', \"__import__('os').getpid()\")])\n"
     "typing.get_type_hints(C)\n", "AttributeError", "evaluates strings"),
    ("from_typing_import_get_type_hints", "from typing import get_type_hints\n",
     "ImportError", "evaluates strings"),
    ("forward_ref", "import typing\ntyping.ForwardRef('1')\n", "AttributeError", "evaluates strings"),
    ("singledispatch_register", "import functools\n"
     "@functools.singledispatch\ndef f(x):\n    return x\n", "AttributeError", "evaluates strings"),
    ("generator_frame", "def g():\n    yield 1\ng().gi_frame.f_globals\n",
     "invalid_program", "gi_frame"),
    ("getattr_generator_frame", "def g():\n    yield 1\ngetattr(g(), 'gi_frame')\n",
     "AttributeError", "restricted name"),
    ("task_stack_frame", "import asyncio\nasync def m():\n"
     "    return getattr(asyncio.current_task().get_stack()[0], 'f_globals')\n"
     "asyncio.run(m())\n", "AttributeError", "the runner's frames"),
    # functools copies attributes by names the caller chooses, past the attribute guard: a
    # module's globals (so its real builtins) into a dict the program holds.
    ("update_wrapper_globals", "import functools, json, dataclasses\nd = {}\n"
     "W = dataclasses.make_dataclass('W', ['x'])\n"
     "functools.update_wrapper(W(d), json.dumps, assigned=(), updated=('x',))\n",
     "AttributeError", "names the program chooses"),
    ("update_wrapper_full_escape", "import functools, json, dataclasses\nd = {}\n"
     "W = dataclasses.make_dataclass('W', ['__globals__'])\n"
     "functools.update_wrapper(W(d), json.dumps, assigned=(), updated=('__globals__',))\n"
     "d['__builtins__']['__import__']('os').getpid()\n", "ValueError", "starts with '_'"),
    ("wraps", "import functools\nfunctools.wraps\n", "AttributeError", "names the program chooses"),
    ("from_functools_import_update_wrapper", "from functools import update_wrapper\n",
     "ImportError", "names the program chooses"),
    ("make_dataclass_dunder_field", "import dataclasses\n"
     "dataclasses.make_dataclass('W', ['__globals__'])\n", "ValueError", "starts with '_'"),
    ("make_dataclass_typed_dunder_field", "from dataclasses import make_dataclass\n"
     "make_dataclass('W', [('__dict__', dict)])\n", "ValueError", "starts with '_'"),
    ("make_dataclass_dunder_namespace", "import dataclasses\n"
     "dataclasses.make_dataclass('W', ['x'], namespace={'__getattr__': len})\n",
     "ValueError", "starts with '_'"),
    # A str subclass whose startswith says no: a dunder method of the program's choosing,
    # whose value dataclasses' generated source formats, run with the real builtins.
    ("make_dataclass_str_subclass_namespace", "import dataclasses\n"
     "class K(str):\n    def startswith(self, *a):\n        return False\n"
     "def fmt(self, spec):\n    return \"__import__('os').getpid()\"\n"
     "S = dataclasses.make_dataclass('S', [], bases=(str,), "
     "namespace={K('__format__'): fmt, K('__doc__'): 'd'}, init=False, eq=False, repr=False)\n",
     "ValueError", "not a plain string"),
    ("make_dataclass_str_subclass_field", "import dataclasses\n"
     "class K(str):\n    def startswith(self, *a):\n        return False\n"
     "dataclasses.make_dataclass('W', [K('__globals__')])\n", "ValueError", "not a plain string"),
    ("make_dataclass_str_subclass_typed_field", "import dataclasses\n"
     "class K(str):\n    def startswith(self, *a):\n        return False\n"
     "dataclasses.make_dataclass('W', [(K('__dict__'), dict, dataclasses.field(default=1))])\n",
     "ValueError", "not a plain string"),
    # dataclasses formats field names into source it runs with the real builtins (a program's
    # class's module is not in sys.modules): names from a metaclass's namespace or a TypedDict.
    ("metaclass_call_dataclass", "import typing, dataclasses\n"
     "evil = \"a,self.a.append(__import__('os').getpid()),self.a.append(open('/etc/hostname').read())\"\n"
     "C = typing.ABCMeta('C', (), {'__annotations__': {evil: int}, 'a': []})\n"
     "D = dataclasses.dataclass(init=False, repr=False)(C)\n"
     "x = D()\nx == x\nx.a\n", "AttributeError", "the metaclass 'ABCMeta'"),
    ("typed_dict_dataclass", "import typing, dataclasses\n"
     "code = \"import os, sys\\nraise LookupError([os.getpid(), len(sys.modules), "
     "open('/etc/passwd').read()[:32]])\"\n"
     "name = \"b=exec(\" + repr(code) + \")):#\"\n"
     "TD = typing.TypedDict('TD', {name: dataclasses.InitVar[int]})\n"
     "try:\n    dataclasses.dataclass(TD)\nexcept LookupError as e:\n    result(e.args[0])\n",
     "TypeError", "the metaclass '_TypedDictMeta'"),
    # ``type`` came back from get_origin: the stand-in refuses it now. What the dataclasses
    # stand-in refuses were it reached: test_restricted_classes.DEPTH.
    ("type_call_dataclass", "import typing, dataclasses\n"
     "T = typing.get_origin(typing.Type[int])\n"
     "evil = \"a,self.a.append(__import__('os').getpid())\"\n"
     "C = T('C', (), {'__annotations__': {evil: int}, 'a': []})\n"
     "x = dataclasses.dataclass(init=False, repr=False)(C)()\nx == x\nx.a\n",
     "TypeError", "the metaclass 'type'"),
    ("type_call_dataclass_decorator_form", "import typing\nfrom dataclasses import dataclass\n"
     "T = typing.get_origin(typing.Type[int])\n"
     "C = T('C', (), {'__annotations__': {\"b=exec('import os')):#\": int}})\n"
     "dataclass(C)\n", "TypeError", "the metaclass 'type'"),
    ("type_call_dataclass_dunder_field", "import typing, dataclasses\n"
     "T = typing.get_origin(typing.Type[int])\n"
     "dataclasses.dataclass(T('C', (), {'__annotations__': {'__globals__': int}}))\n",
     "TypeError", "the metaclass 'type'"),
    ("type_call_dataclass_str_subclass_field", "import typing, dataclasses\n"
     "T = typing.get_origin(typing.Type[int])\n"
     "K = T('K', (str,), {'__format__': lambda s, spec: \"a,self.a.append(__import__('os').getpid())\"})\n"
     "C = T('C', (), {'__annotations__': {K('b'): int}, 'a': []})\n"
     "x = dataclasses.dataclass(init=False, repr=False)(C)()\nx == x\nx.a\n",
     "TypeError", "the metaclass 'type'"),
    ("type_call_dataclass_annotations_mapping", "import typing, dataclasses\n"
     "T = typing.get_origin(typing.Type[int])\n"
     "A = T('A', (dict,), {})\n"
     "dataclasses.dataclass(T('C', (), {'__annotations__': A(a=int)}))\n",
     "TypeError", "the metaclass 'type'"),
    # A base whose fields table the program wrote: a field whose name is code.
    ("dataclass_forged_base_fields", "import typing, dataclasses\n"
     "T = typing.get_origin(typing.Type[int])\n"
     "F = T('F', (), {'name': \"a=__import__('os').getpid()\", 'default': dataclasses.MISSING,"
     " 'default_factory': dataclasses.MISSING, 'init': True, 'repr': True, 'compare': True,"
     " 'kw_only': False, 'type': int})\n"
     "B = T('B', (), {'__dataclass_fields__': {'a': F()},"
     " '__dataclass_params__': dataclasses.make_dataclass('Q', ['frozen'])(False)})\n"
     "dataclasses.dataclass(T('C', (B,), {}))().a\n",
     "TypeError", "the metaclass 'type'"),
    ("make_dataclass_forged_base_fields", "import typing, dataclasses\n"
     "T = typing.get_origin(typing.Type[int])\n"
     "B = T('B', (), {'__dataclass_fields__': {}})\n"
     "dataclasses.make_dataclass('W', ['x'], bases=(B,))\n",
     "TypeError", "the metaclass 'type'"),
    # A metaclass of the program's: a class statement whose base resolves to ``type``.
    ("program_metaclass_dataclass", "import typing, dataclasses\n"
     "class M(typing.Type[int]):\n    pass\n"
     "evil = \"a,self.a.append(__import__('os').getpid())\"\n"
     "C = M('C', (), {'__annotations__': {evil: int}, 'a': []})\n"
     "x = dataclasses.dataclass(init=False, repr=False)(C)()\nx == x\nx.a\n",
     "TypeError", "the base 'type' is a metaclass"),
    ("class_statement_metaclass_base", "import typing\n"
     "class M(typing.Type[int]):\n    pass\n"
     "M('E', (), {'__reduce_ex__': len})\n", "TypeError", "the base 'type' is a metaclass"),
    ("class_statement_typed_dict_base", "import typing\n"
     "class C(typing.TypedDict):\n    pass\n", "TypeError", "the metaclass '_TypedDictMeta'"),
    # ``type`` from typing's helpers: called, it makes a class of any namespace (a
    # ``__reduce_ex__`` that copy calls and whose state it writes onto a module).
    ("get_origin_type", "import typing\ntyping.get_origin(typing.Type[int])\n",
     "TypeError", "the metaclass 'type'"),
    ("get_origin_special_alias", "from typing import get_origin, Type\nget_origin(Type)\n",
     "TypeError", "the metaclass 'type'"),
    ("get_origin_in_a_thread", "import typing, asyncio\nasync def m():\n"
     "    return await asyncio.to_thread(typing.get_origin, typing.Type[int])\n"
     "asyncio.run(m())\n", "TypeError", "the metaclass 'type'"),
    *((name, PROGRAMS[name], "TypeError", "the metaclass 'type'") for name in PROGRAMS),
    # RestrictedPython's setattr/delattr check no name.
    ("setattr_dunder", "class A:\n    pass\nsetattr(A(), '__class__', A)\n",
     "AttributeError", "starts with '_'"),
    ("setattr_init_subclass", "class A:\n    pass\n"
     "setattr(A, '__init_subclass__', lambda *a: 1)\n", "AttributeError", "starts with '_'"),
    ("delattr_dunder", "class A:\n    pass\ndelattr(A(), '__dict__')\n",
     "AttributeError", "starts with '_'"),
    ("setattr_module", "import json\nsetattr(json, 'loads', len)\n", "TypeError", "attribute-less"),
    ("make_dataclass_alias_base", "import typing, dataclasses\n"
     "dataclasses.make_dataclass('W', ['x'], bases=(typing.Type[int],))\n",
     "TypeError", "is not a class"),
    # The event loop's methods that take a descriptor: the bridge's (3) takes a forged frame.
    ("loop_connect_write_pipe", "import asyncio\nclass P:\n    def fileno(self):\n"
     "        return 3\nasync def m():\n"
     "    t, p = await asyncio.get_running_loop().connect_write_pipe(asyncio.Protocol, P())\n"
     "    t.write(b'\\0\\0\\0\\2{}')\n    return 'written'\nasyncio.run(m())\n",
     "AttributeError", "descriptors, sockets"),
    ("loop_connect_read_pipe", "import asyncio\nasync def m():\n"
     "    return asyncio.get_running_loop().connect_read_pipe\nasyncio.run(m())\n",
     "AttributeError", "descriptors, sockets"),
    ("loop_add_writer", "import asyncio\nasync def m():\n"
     "    return asyncio.get_running_loop().add_writer\nasyncio.run(m())\n",
     "AttributeError", "descriptors, sockets"),
    ("loop_create_unix_connection", "import asyncio\nasync def m():\n"
     "    return asyncio.get_running_loop().create_unix_connection\nasyncio.run(m())\n",
     "AttributeError", "descriptors, sockets"),
    ("loop_create_connection", "import asyncio\nasync def m():\n"
     "    return asyncio.get_running_loop().create_connection\nasyncio.run(m())\n",
     "AttributeError", "descriptors, sockets"),
    ("loop_sock_sendall", "import asyncio\nasync def m():\n"
     "    return asyncio.get_running_loop().sock_sendall\nasyncio.run(m())\n",
     "AttributeError", "descriptors, sockets"),
    ("loop_method_of_the_class", "import asyncio\nasyncio.SelectorEventLoop.connect_write_pipe\n",
     "AttributeError", "descriptors, sockets"),
    ("open_unix_connection", "import asyncio\nasyncio.open_unix_connection\n",
     "AttributeError", "descriptors, sockets"),
    ("from_asyncio_import_start_server", "from asyncio import start_server\n",
     "ImportError", "descriptors, sockets"),
    ("namespace_dict_item", "[{'__builtins__': {}}][0]\n", "LookupError", "namespace"),
    ("namespace_dict_iterated", "[d for d in [{'__builtins__': {}}]]\n", "LookupError",
     "namespace"),
    ("namespace_dict_unpacked", "(a, b), = [({'__builtins__': {}}, 1)]\n", "LookupError",
     "namespace"),
    ("task_frame_locals", "import asyncio\nasync def m():\n"
     "    f = asyncio.current_task().get_stack()[0]\n"
     "    s = asyncio.format_helpers.extract_stack()\n"
     "    return sorted(s.extract([(f, 1)], capture_locals=True)[0].locals)\n"
     "asyncio.run(m())\n", "AttributeError", "the runner's frames"),
    ("asyncio_subprocess", "import asyncio\nasyncio.create_subprocess_exec\n",
     "AttributeError", "starts processes"),
    ("event_loop_subprocess", "import asyncio\nasync def m():\n"
     "    return asyncio.get_running_loop().subprocess_shell\nasyncio.run(m())\n",
     "AttributeError", "starts processes"),
    ("task_print_stack", "import asyncio\nasync def m():\n"
     "    return asyncio.current_task().print_stack\nasyncio.run(m())\n",
     "AttributeError", "the runner's frames"),
    # asyncio's submodules are not handed out: format_helpers leads to traceback and linecache,
    # which read any file.
    ("linecache_file_read", "import asyncio\ns = asyncio.format_helpers.extract_stack()\n"
     "s.from_list([('/etc/passwd', 1, 'x', None)])[0].line\n",
     "AttributeError", "the module 'asyncio.format_helpers'"),
    ("import_asyncio_submodule", "import asyncio.format_helpers\n", "invalid_program",
     "'asyncio.format_helpers' is not allowed"),
    ("from_asyncio_import_submodule", "from asyncio import format_helpers\n", "ImportError",
     "the module 'asyncio.format_helpers'"),
    ("asyncio_events", "import asyncio\nasyncio.events\n", "AttributeError",
     "the module 'asyncio.events'"),
    ("userstring_format", "import collections\n"
     "collections.UserString('{0._connection!r}').format(tools)\n", "AttributeError", "formats"),
    ("userstring_format_map", "import collections\n"
     "collections.UserString('{x}').format_map({'x': 1})\n", "AttributeError", "formats"),
    ("userstring_format_unbound", "import collections\n"
     "getattr(collections.UserString, 'format')\n", "AttributeError", "formats"),
    ("coroutine_frame", "async def m():\n    return 1\ngetattr(m(), 'cr_frame')\n",
     "AttributeError", "restricted name"),
    ("str_format_attribute", "'{0.gi_frame}'.format((x for x in []))\n",
     "NotImplementedError", "format"),
    ("str_format_map", "'{x}'.format_map({'x': 1})\n", "NotImplementedError", "format"),
    ("subclasses", "().__class__.__base__.__subclasses__()\n", "invalid_program", "__class__"),
    ("getattr_dunder", "getattr((), '__class__')\n", "AttributeError", "starts with"),
    ("builtins_name", "__builtins__\n", "invalid_program", "__builtins__"),
    ("traceback_of_exception", "try:\n    1 / 0\nexcept Exception as e:\n    e.__traceback__\n",
     "invalid_program", "__traceback__"),
    ("tools_connection", "tools._connection\n", "invalid_program", "_connection"),
    ("import_os", "import os\nos.getpid()\n", "invalid_program", "'os' is not allowed"),
    # type.mro handed out enum.Enum, whose functional API makes a class of any namespace: a
    # __reduce_ex__ that copy calls, writing its state onto a module (dataclasses._create_fn).
    ("enum_mro_escape", ENUM_ESCAPE, "AttributeError", "a class's bases"),
    ("mro_of_an_enum", "import re\n[str(c) for c in re.RegexFlag.mro()]\n",
     "AttributeError", "a class's bases"),
    ("mro_of_an_exception", "import json\njson.JSONDecodeError.mro()\n",
     "AttributeError", "a class's bases"),
    ("mro_of_a_builtin", "int.mro()\n", "AttributeError", "a class's bases"),
    ("mro_by_getattr", "import re\ngetattr(re.RegexFlag, 'mro')()\n",
     "AttributeError", "a class's bases"),
    ("mro_from_import", "from re import RegexFlag\nRegexFlag.mro\n",
     "AttributeError", "a class's bases"),
    # The loop's exception handler formats a context's tracebacks, whose lines linecache reads
    # from any file the context names.
    ("new_loop_default_exception_handler", "import asyncio\n"
     "loop = asyncio.new_event_loop()\n"
     "loop.default_exception_handler({'message': 'x', 'source_traceback': "
     "[('/etc/passwd', n, 'f', None) for n in range(1, 4)]})\n",
     "AttributeError", "reads any file"),
    ("loop_default_exception_handler", "import asyncio\nasync def m():\n"
     "    loop = asyncio.get_running_loop()\n"
     "    loop.default_exception_handler({'message': 'x', 'source_traceback': "
     "[('/etc/passwd', 1, 'f', None)]})\n    return 'done'\nasyncio.run(m())\n",
     "AttributeError", "reads any file"),
    ("loop_call_exception_handler", "import asyncio\nasync def m():\n"
     "    loop = asyncio.get_running_loop()\n"
     "    loop.call_exception_handler({'message': 'x', 'handle_traceback': "
     "[('/etc/hostname', 1, 'f', None)]})\n    return 'done'\nasyncio.run(m())\n",
     "AttributeError", "reads any file"),
    ("loop_class_default_exception_handler",
     "import asyncio\nasyncio.SelectorEventLoop.default_exception_handler\n",
     "AttributeError", "reads any file"),
    ("loop_set_exception_handler", "import asyncio\nasync def m():\n"
     "    asyncio.get_running_loop().set_exception_handler(lambda loop, context: None)\n"
     "asyncio.run(m())\n", "AttributeError", "the loop's contexts"),
]  # fmt: skip

# (route, program, error type, a phrase of the message), run where a profile lets programs
# import ``enum`` (none does by default): an enum class without members, called with names,
# makes a class of any namespace; one with members only looks a member up.
WITH_ENUM: list[tuple[str, str, str, str]] = [
    ("enum_functional_api", "import enum\n"
     "enum.Enum('X', [('__reduce_ex__', len), ('__deepcopy__', None), ('a', 1)])\n",
     "AttributeError", "can make a class of any namespace"),
    ("flag_functional_api", "from enum import Flag\nFlag('X', ['a'])\n",
     "ImportError", "can make a class of any namespace"),
    ("int_flag_functional_api", "import enum\nenum.IntFlag('X', 'a b')\n",
     "AttributeError", "can make a class of any namespace"),
    ("str_enum_functional_api", "import enum\nenum.StrEnum('X', ['a'])\n",
     "AttributeError", "can make a class of any namespace"),
    ("int_enum_functional_api", "import enum\nenum.IntEnum('X', {'a': 1})\n",
     "AttributeError", "can make a class of any namespace"),
    ("enum_escape_with_enum_imported",
     ENUM_ESCAPE.replace("E = [c for c in re.RegexFlag.mro() if str(c) == \"<enum 'Enum'>\"][0]",
                         "import enum\nE = enum.Enum"),
     "AttributeError", "can make a class of any namespace"),
    ("enum_type", "import enum\nenum.EnumType\n", "AttributeError", "the metaclass 'EnumType'"),
    # A class with members: called with names, the standard library refuses to extend it.
    ("enum_with_members_functional_api", "import enum, re\n"
     "re.RegexFlag('X', [('__reduce_ex__', len), ('a', 1)])\n", "TypeError", "cannot extend"),
]  # fmt: skip


def _module_attributes() -> dict[str, dict[str, int]]:
    """The ids of the attributes of the modules an escape wrote onto."""
    import collections
    import copy
    import dataclasses
    import json
    import typing

    return {
        module.__name__: {name: id(value) for name, value in vars(module).items()}
        for module in (collections, copy, dataclasses, json, typing)
    }


@pytest.mark.parametrize(
    ("route", "program", "error", "phrase"), BYPASSES, ids=[row[0] for row in BYPASSES]
)
def test_a_known_route_out_of_restricted_mode_is_refused(
    route: str, program: str, error: str, phrase: str
) -> None:
    _assert_refused(route, program, error, phrase, ALLOWED)


@pytest.mark.parametrize(
    ("route", "program", "error", "phrase"), WITH_ENUM, ids=[row[0] for row in WITH_ENUM]
)
def test_an_enum_class_that_makes_classes_is_refused(
    route: str, program: str, error: str, phrase: str
) -> None:
    _assert_refused(route, program, error, phrase, ALLOWED | {"enum"})


def _assert_refused(
    route: str, program: str, error: str, phrase: str, allowed: frozenset[str]
) -> None:
    before = _module_attributes()
    result = run_in_process(program, mode="restricted", allowed_imports=allowed)
    assert _module_attributes() == before, route  # nothing written onto a module
    if error == "invalid_program":
        assert result["status"] == "invalid_program", (route, result)
    else:
        assert result["status"] == "error", (route, result["value"])
        assert result["error"]["type"] == error, result["error"]
    assert phrase in result["error"]["message"], result["error"]
    assert not result["has_value"]


@pytest.mark.parametrize(
    "program",
    [
        "import collections.abc\nisinstance([], collections.abc.Sequence)\n",
        "import json\njson.decoder.JSONDecoder().decode('[1]')\n",
        "import asyncio\nasync def m():\n    return 2\nasyncio.run(m())\n",
        "import dataclasses\nP = dataclasses.make_dataclass('P', ['x'])\nP(1).x\n",
        "import typing\ntyping.Optional[int] is not None\n",
        # Class statements hold no annotations in restricted mode: fields come from
        # make_dataclass, and the decorator makes dataclasses of classes derived from them.
        "import dataclasses, typing\nfrom dataclasses import dataclass, field\n"
        "P = dataclasses.make_dataclass('P', ['x', ('y', typing.List[int], "
        "field(default_factory=list))])\n"
        "F = dataclasses.make_dataclass('F', ['a', ('b', str, 'b')], frozen=True, order=True)\n"
        "@dataclass(frozen=True)\nclass G(F):\n    def twice(self):\n        return 2 * self.a\n"
        "@dataclasses.dataclass\nclass Q(P):\n    pass\n"
        "S = dataclass(slots=True)(dataclasses.make_dataclass('S', ['k'], kw_only=True))\n"
        "[P(1).y, F(1) < F(2), F(1) == 1, hash(G(1)) == hash(G(1)), repr(G(1, 'z')), S(k=3).k,"
        " G(2).twice(), dataclasses.asdict(Q(1, [2])), dataclasses.replace(F(1), a=5).a]\n",
        "from dataclasses import make_dataclass\n"
        "P = make_dataclass('P', [('x', int), ('y', int, 2)], namespace={'s': lambda p: p.x})\n"
        "P(1).s() + P(1).y\n",
        "import collections\nP = collections.namedtuple('P', 'a b')\nP(1, 2).b\n",
        "import collections\ncollections.UserString('ab').upper().data\n",
        "random.seed(1)\n[random.randint(1, 1), string.ascii_lowercase[:2], math.floor(1.5)]\n",
        "import functools\nfunctools.partial(max, 1)(2) + functools.reduce(max, [1, 3])\n",
        'import json\nd = json.loads(\'{"a": [{"b": 1}]}\')\n'
        "[v for k, v in d['a'][0].items()] + [k for k in d]\n",
        "import asyncio\nasync def one(s, n):\n    async with s:\n"
        "        await asyncio.sleep(0)\n        return n\n"
        "async def m():\n    s = asyncio.Semaphore(2)\n"
        "    t = asyncio.create_task(one(s, 0))\n"
        "    rest = await asyncio.gather(*[one(s, n) for n in range(1, 4)])\n"
        "    return [await asyncio.wait_for(t, 1)] + rest\n"
        "asyncio.run(m())\n",
        # Class statements: plain methods, the dunders RestrictedPython allows, a docstring,
        # inheritance, a generic base, an abstract one, a subclass of UserDict (copied too).
        "import typing, collections, collections.abc\nT = typing.TypeVar('T')\n"
        "class A:\n    'doc'\n    k = 1\n    def __init__(self, v):\n        self.v = v\n"
        "    def __eq__(self, other):\n        return self.v == other.v\n"
        "    def twice(self):\n        return 2 * self.v\n"
        "class B(A):\n    def twice(self):\n        return 3 * self.v\n"
        "class G(typing.Generic[T]):\n    def get(self):\n        return 1\n"
        "class S(collections.abc.Container):\n    def __contains__(self, x):\n        return x == 4\n"
        "class U(collections.UserDict):\n    def total(self):\n        return sum(self.values())\n"
        "u = U(a=1)\nu['b'] = 2\nw = u.copy()\nsetattr(u, 'note', 'n')\n"
        "[A(2).twice(), B(2).twice(), A(1) == A(1), G().get(), u.total(), w.total(),"
        " isinstance(w, U), u.note, B.k, 4 in S()]\n",
        # An enum class with members: called with a value, it looks a member up.
        "import re\n[int(re.RegexFlag(2)), int(re.RegexFlag['IGNORECASE'] | re.M),"
        " isinstance(re.I, re.RegexFlag), len(list(re.RegexFlag)) > 1, re.I.name]\n",
    ],
    ids=[
        "submodule_of_an_import",
        "json",
        "asyncio",
        "dataclass",
        "typing_alias",
        "dataclass_decorator",
        "make_dataclass_fields",
        "namedtuple",
        "user_string",
        "utility_builtins",
        "functools",
        "json_items",
        "asyncio_fan_out",
        "class_statements",
        "enum_members",
    ],
)
def test_what_a_program_imports_stays_usable(program: str) -> None:
    result = run_in_process(program, mode="restricted")
    assert result["status"] == "ok", result["error"]


@pytest.mark.parametrize("name", ["Enum", "Flag", "IntFlag", "IntEnum", "StrEnum", "ReprEnum"])
def test_an_enum_class_without_members_is_refused_as_a_value(name: str) -> None:
    import enum

    refused = guard.refusal(getattr(enum, name), frozenset({"enum"}))
    assert refused is not None
    assert "can make a class of any namespace" in refused


def test_an_enum_class_with_members_is_a_value_a_program_may_hold() -> None:
    import http
    import re

    for cls in (re.RegexFlag, http.HTTPStatus):
        assert guard.refusal(cls, frozenset({"re", "http"})) is None


_GET_TYPE = "T = typing.get_origin(typing.Type[int])\n"
_GET_ENUM = "E = [c for c in re.RegexFlag.mro() if str(c) == \"<enum 'Enum'>\"][0]\n"
_PICK = "def pick():\n    return TARGET\ndef red(self, proto):\n    return (pick, (), STATE)\n"

# (route, program given ``T`` (``type``) and ``E`` (``enum.Enum``) past the guard, error type,
# a phrase of the message): were a program to make a class with a reducer anyway, copy writes
# its state onto no object but a new one of the reduced object's type.
COPY_DEPTH: list[tuple[str, str, str, str]] = [
    ("deepcopy_reduce_module_write", PROGRAMS["deepcopy_reduce_module_write"].replace(_GET_TYPE, ""),
     "TypeError", "copy would write"),
    ("deepcopy_create_fn_escape", PROGRAMS["deepcopy_create_fn_escape"].replace(_GET_TYPE, ""),
     "TypeError", "copy would write"),
    ("enum_reduce_escape", ENUM_ESCAPE.replace(_GET_ENUM, ""), "TypeError", "copy would write"),
    ("userdict_copy_module_write", "import collections, json\n"
     + _PICK.replace("TARGET", "json").replace("STATE", "({'marker': 1}, None)")
     + "U = T('U', (collections.UserDict,), {'__reduce_ex__': red, '__copy__': None})\n"
     "U().copy()\n", "TypeError", "copy would write"),
    ("copy_module_write", "import copy, json\n"
     + _PICK.replace("TARGET", "json").replace("STATE", "(None, {'loads': len})")
     + "copy.copy(T('R', (), {'__reduce_ex__': red})())\n", "TypeError", "copy would write"),
    ("deepcopy_class_write", "import copy, json\n"
     + _PICK.replace("TARGET", "json.JSONDecoder").replace("STATE", "(None, {'__init__': len})")
     + "copy.deepcopy(T('R', (), {'__reduce_ex__': red})())\n", "TypeError", "copy would write"),
    ("enum_deepcopy_instance_of_another_class", "import copy, json\n"
     + _PICK.replace("TARGET", "json.JSONDecoder()").replace("STATE", "{'parse_int': len}")
     + "X = E('X', [('__reduce_ex__', red), ('__deepcopy__', None), ('a', 1)])\n"
     "copy.deepcopy(X.a)\n", "TypeError", "copy would write"),
    ("astuple_items_onto_a_list", "import dataclasses\nheld = []\n"
     + _PICK.replace("TARGET", "held").replace("STATE", "None, iter([1])")
     + "D = dataclasses.make_dataclass('D', ['x'])\n"
     "dataclasses.astuple(D(T('R', (), {'__reduce_ex__': red})()))\n",
     "TypeError", "copy would write"),
]  # fmt: skip


@pytest.fixture
def copy_as_it_was() -> Iterator[None]:
    import copy

    reconstruct = vars(copy)["_reconstruct"]
    try:
        yield
    finally:
        copy._reconstruct = reconstruct  # type: ignore[attr-defined]  # private


@pytest.mark.usefixtures("copy_as_it_was")
@pytest.mark.parametrize(
    ("route", "program", "error", "phrase"), COPY_DEPTH, ids=[row[0] for row in COPY_DEPTH]
)
def test_copy_writes_a_reducers_state_only_onto_a_copy(
    route: str, program: str, error: str, phrase: str
) -> None:
    import enum

    allowed = ALLOWED | {"copy"}
    body, last = language.compile_program(program, "restricted", allowed)
    namespace = language.restricted_globals(allowed, lambda value: None, tools=None)
    namespace.update(T=type, E=enum.Enum)
    before = _module_attributes()  # copy's checked reconstruction installed
    with pytest.raises(Exception) as refused:  # noqa: PT011  # the row names the type
        language.run_program(body, last, namespace, lambda value: None, lambda: False)
    assert type(refused.value).__name__ == error, (route, refused.value)
    assert phrase in str(refused.value), refused.value
    assert _module_attributes() == before, route


@pytest.mark.usefixtures("copy_as_it_was")
def test_copy_still_copies_the_standard_library_s_objects() -> None:
    import collections
    import copy
    import dataclasses
    import datetime
    import decimal
    import fractions
    import functools
    import types

    copying.guard_copy()
    copying.guard_copy()  # once: a second call wraps nothing twice
    assert vars(copy)["_reconstruct"].__wrapped__.__module__ == "copy"

    class Noted(collections.OrderedDict):  # type: ignore[type-arg]
        pass

    class Kept(collections.UserDict):  # type: ignore[type-arg]
        def __getstate__(self) -> dict[str, object]:
            return {"data": self.data, "seen": True}

    Point = dataclasses.make_dataclass("Point", ["x", "y"])
    noted = Noted(a=1)
    noted.note = "n"  # type: ignore[attr-defined]
    values: list[object] = [
        collections.OrderedDict(a=1),
        collections.defaultdict(list, a=[1]),
        collections.deque([1, 2], maxlen=3),
        collections.Counter("aab"),
        collections.namedtuple("P", "a b")(1, 2),
        functools.partial(max, 1, key=abs),
        types.SimpleNamespace(a=1),
        Point(1, [2]),
        Kept(a=1),
        datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC),
        decimal.Decimal("1.5"),
        fractions.Fraction(1, 3),
        noted,
    ]
    for value in values:
        for copied in (copy.copy(value), copy.deepcopy(value)):
            assert type(copied) is type(value)
            assert repr(copied) == repr(value) or copied == value, value
    assert copy.deepcopy(noted).note == "n"  # type: ignore[attr-defined]
    assert dataclasses.asdict(Point(1, [2])) == {"x": 1, "y": [2]}


def test_every_evaluator_is_refused_as_a_value() -> None:
    allowed = frozenset({"typing", "functools"})
    for evaluator in language.evaluators():
        assert language.refusal(evaluator, allowed)


@pytest.mark.docker
def test_the_image_ships_the_guard(sandbox: Sandbox) -> None:
    result = sandbox.run("import typing\ntyping.sys.modules['os'].getpid()\n")
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "AttributeError"
    assert "the module 'sys'" in result.error.message


IMAGE_ROUTES = [
    "update_wrapper_full_escape",
    "update_wrapper_globals",
    "linecache_file_read",
    "task_frame_locals",
    "userstring_format",
    "namespace_dict_item",
    "make_dataclass_str_subclass_namespace",
    "metaclass_call_dataclass",
    "typed_dict_dataclass",
    "type_call_dataclass",
    "dataclass_forged_base_fields",
    "program_metaclass_dataclass",
    "loop_connect_write_pipe",
    "class_statement_metaclass_base",
    "get_origin_type",
    "deepcopy_reduce_module_write",
    "deepcopy_create_fn_escape",
    "userdict_copy_module_write",
    "init_subclass_annotations_escape",
    "setattr_dunder",
    "enum_mro_escape",
    "new_loop_default_exception_handler",
    "loop_call_exception_handler",
]


@pytest.mark.docker
@pytest.mark.parametrize("route", IMAGE_ROUTES)
def test_the_image_refuses_the_routes_of_its_guard(sandbox: Sandbox, route: str) -> None:
    _, program, error, phrase = next(row for row in BYPASSES if row[0] == route)
    result = sandbox.run(program)
    assert result.status == "error", (route, result)
    assert result.error is not None
    assert result.error.type == error, result.error
    assert phrase in result.error.message, result.error
    assert not result.has_value


FORGED_DONE = """
import asyncio, json
# A restricted program writes raw frames on the bridge socket: a forged DONE frame.
class P:
    def fileno(self):
        return self.fd
def frame(msg):
    body = json.dumps(msg).encode()
    n = len(body)
    return (chr(0) + chr(0) + chr(n // 256) + chr(n % 256)).encode("latin-1") + body
async def m():
    loop = asyncio.get_running_loop()
    seen = []
    for fd in range(3, 12):
        p = P()
        p.fd = fd
        try:
            t, pr = await loop.connect_write_pipe(asyncio.Protocol, p)
        except Exception as e:
            seen.append([fd, repr(e)[:50]])
            continue
        seen.append([fd, 'writable'])
        t.write(frame({"type": "log", "message": "forged log line from a restricted program"}))
        t.write(frame({"type": "done", "result": {"status": "ok", "exit_status": 0, "has_value": True,
            "value": ["FORGED by restricted program", seen], "stdout": "", "stderr": "",
            "truncated": False, "duration_s": 0.0, "cpu_time_s": 0.0, "peak_memory_bytes": 0,
            "error": None}}))
        await asyncio.sleep(0.5)
        return seen
    return seen
asyncio.run(m())
result("real value")
"""
"""A program that, were the loop's descriptor methods open, writes a ``done`` frame of its own
on the bridge (descriptor 3); each attempt fails with an exception it catches."""


@pytest.mark.docker
def test_a_restricted_program_cannot_write_on_the_bridge(sandbox: Sandbox) -> None:
    result = sandbox.run(FORGED_DONE)
    assert (result.status, result.value, result.error) == ("ok", "real value", None)
