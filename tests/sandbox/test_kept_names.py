"""Which kept names a kept session's next program gets back: never the run's own.

The guest's ``airlock_kept`` on the host. Every process of a kept container runs as the same
user, so the file of names may be a program's own work (a full-mode program can write it):
reading it back gives a program only what ``keep`` writes, never a name that takes the place
of the run's own bindings (``result``, ``tools``, the guards), and a restricted program
nothing its import rules and attribute guard would refuse it.
"""

from __future__ import annotations

import collections
import decimal
import json
import json.decoder
import math
import os
import pickle
import types
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.sandbox.guest_image import load_guest, load_runner

kept = load_guest("airlock_kept")
kept_file = load_guest("airlock_kept_file")
language = load_guest("airlock_language")
bridge = load_guest("airlock_bridge")
wire = load_guest("airlock_wire")

ALLOWED = frozenset(wire.WARM_UP_IMPORTS)


runner = load_runner()


def _namespace(mode: str) -> dict[str, Any]:
    tools = bridge.Tools(None, [])
    if mode == "restricted":
        return dict(language.restricted_globals(ALLOWED, lambda _value: None, tools))
    return dict(language.full_globals(lambda _value: None, tools))


def _guard(mode: str) -> Any:
    # What the runner passes: a restricted program's refusals.
    return (lambda value: language.refusal(value, ALLOWED)) if mode == "restricted" else None


def _restore(
    path: Path,
    mode: str,
    *,
    data: dict[str, bytes] | None = None,
    functions: dict[str, str] | None = None,
    modules: dict[str, str] | None = None,
) -> tuple[dict[str, Any], Any]:
    path.write_bytes(kept_file.encode_names(data or {}, functions or {}, modules or {}))
    reader = kept.KeptGlobals(str(path))
    reader.read()
    namespace = _namespace(mode)
    compile_definition = lambda text: language.compile_program(text, mode, ALLOWED)[0]  # noqa: E731
    reader.restore(namespace, compile_definition, _guard(mode))
    return namespace, reader


MODES = ["full", "restricted"]

CRAFTED_ENTRIES: list[tuple[str, str]] = [
    ("csv:re.enum.sys", "a path through other modules to sys"),
    ("json:decoder.re.enum.sys", "a path through a submodule"),
    ("re:enum.sys", "a module's module"),
    ("statistics:random._os", "a private name"),
    ("json.decoder:JSONDecoder.__init__", "a private attribute of a class"),
    ("json:decoder", "a submodule named as an attribute"),
    ("json:dumps.__globals__", "a function's globals"),
    ("collections:OrderedDict.fromkeys.__self__", "a private name at the end"),
    ("json.decoder:JSONDecoder..decode", "an empty part"),
    ("json:JSONDecoder", "a class a module imported from another (keep names that one)"),
]
"""Module entries ``keep`` never writes, as a program may write them: never restored."""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("where", "what"), CRAFTED_ENTRIES, ids=[c[0] for c in CRAFTED_ENTRIES])
def test_a_module_entry_keep_never_writes_is_not_restored(
    tmp_path: Path, mode: str, where: str, what: str
) -> None:
    namespace, reader = _restore(tmp_path / "names", mode, modules={"s": where})

    assert "s" not in namespace, (what, namespace.get("s"))
    assert any(note.startswith(f"s ({where} is ") for note in reader.notes), reader.notes


REFUSED_TO_RESTRICTED = ["typing:get_type_hints", "functools:singledispatch", "typing:ForwardRef"]
"""Entries a full program may keep, which a restricted one may not hold (they evaluate strings
outside its guards): ``from typing import get_type_hints`` is refused to it."""


@pytest.mark.parametrize("where", REFUSED_TO_RESTRICTED)
def test_a_restricted_program_gets_no_kept_value_its_guard_refuses(
    tmp_path: Path, where: str
) -> None:
    namespace, reader = _restore(tmp_path / "names", "restricted", modules={"f": where})
    full, _ = _restore(tmp_path / "full", "full", modules={"f": where})

    assert "f" not in namespace
    assert "evaluates strings outside restricted mode's guards" in "; ".join(reader.notes)
    assert full["f"] is not None  # a full program holds it as before


KEPT_ENTRIES: list[tuple[str, object]] = [
    ("json", json),
    ("json.decoder", json.decoder),
    ("math:sqrt", math.sqrt),
    ("collections:OrderedDict", collections.OrderedDict),
    ("json.decoder:JSONDecoder", json.JSONDecoder),
    ("json.decoder:JSONDecoder.decode", json.JSONDecoder.decode),
    ("decimal:Decimal", decimal.Decimal),
]
"""Entries ``keep`` writes (``import json``, ``from math import sqrt``): restored in both
modes, as the import gives them."""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("where", "value"), KEPT_ENTRIES, ids=[c[0] for c in KEPT_ENTRIES])
def test_a_module_entry_keep_writes_comes_back(
    tmp_path: Path, mode: str, where: str, value: object
) -> None:
    namespace, reader = _restore(tmp_path / "names", mode, modules={"m": where})

    assert reader.notes == []
    assert namespace["m"] is value


GUARDS = ["_getattr_", "_getitem_", "_write_", "_print_", "_getiter_", "_apply_"]
RUN_OWN = [
    *[("full", name) for name in ("result", "tools", "__builtins__", "__name__")],
    *[("restricted", name) for name in ("result", "tools", "__builtins__", *GUARDS)],
]
"""The run's own bindings (its globals, and ``result`` in its builtins); a full program has
no guards."""


@pytest.mark.parametrize(("mode", "name"), RUN_OWN)
@pytest.mark.parametrize("kind", ["data", "function", "module"])
def test_a_kept_name_never_takes_the_place_of_the_runs_own(
    tmp_path: Path, mode: str, name: str, kind: str
) -> None:
    fresh = _namespace(mode)
    entries: dict[str, Any] = {
        "data": {"data": {name: pickle.dumps("not the run's own")}},
        "function": {"functions": {name: f"def {name}(value):\n    return None\n"}},
        "module": {"modules": {name: "json"}},
    }[kind]

    namespace, reader = _restore(tmp_path / "names", mode, **entries)

    assert set(namespace) == set(fresh)
    for key in ("tools", "_getattr_"):
        if key in fresh:
            assert type(namespace[key]) is type(fresh[key])
    assert namespace["__builtins__"]["result"] is not None
    assert f"{name} (the run's own name)" in reader.notes


def test_a_private_name_is_kept_for_a_full_program_only(tmp_path: Path) -> None:
    data = {"_cache": pickle.dumps({"a": 1})}

    full, _ = _restore(tmp_path / "full", "full", data=data)
    restricted, reader = _restore(tmp_path / "restricted", "restricted", data=data)

    assert full["_cache"] == {"a": 1}
    assert "_cache" not in restricted
    assert "_cache (a name restricted mode refuses)" in reader.notes


def test_the_runs_own_builtins_are_all_reserved() -> None:
    from RestrictedPython.Guards import safe_builtins
    from RestrictedPython.Limits import limited_builtins
    from RestrictedPython.Utilities import utility_builtins

    python = set(vars(__import__("builtins")))
    restricted_python = python | set(safe_builtins) | set(limited_builtins) | set(utility_builtins)

    full = set(_namespace("full")["__builtins__"]) - python
    restricted = set(_namespace("restricted")["__builtins__"]) - restricted_python

    assert full == restricted == set(kept.RUN_OWN_BUILTINS)


def _execute(path: Path, program: str, mode: str) -> dict[str, Any]:
    names = kept.KeptGlobals(str(path))
    names.read()
    request = {"program": program, "mode": mode, "allowed_imports": sorted(ALLOWED)}
    result: dict[str, Any] = runner.execute(request, lambda _result: None, None, names)
    return result


@pytest.mark.parametrize("first_mode", MODES)
@pytest.mark.parametrize("mode", MODES)
def test_a_kept_def_named_result_does_not_answer_for_the_next_program(
    tmp_path: Path, first_mode: str, mode: str
) -> None:
    path = tmp_path / "names"
    first = _execute(path, "def result(value):\n    return None\n'first'", first_mode)
    second = _execute(path, "result(7)", mode)

    assert (second["status"], second["has_value"], second["value"]) == ("ok", True, 7), second
    assert "result (the run's own name)" in first["stderr"]


def _renamed(module: ModuleType, name: str) -> ModuleType:
    module.__name__ = name
    return module


MODULE_VALUES: list[tuple[str, Any, str | None]] = [
    ("imported", json, "json"),
    ("imported under another name", os.path, os.path.__name__),
    ("made up, named as a module not imported", types.ModuleType("this"), None),
    ("made up, named as an imported module", types.ModuleType("json"), None),
    ("made up, renamed", _renamed(types.ModuleType("x"), "json"), None),
]


@pytest.mark.parametrize(
    ("value", "entry"), [c[1:] for c in MODULE_VALUES], ids=[c[0] for c in MODULE_VALUES]
)
def test_only_a_module_imported_as_its_name_is_kept(
    tmp_path: Path, value: ModuleType, entry: str | None
) -> None:
    writer = kept.KeptGlobals(str(tmp_path / "names"))

    writer.keep({"z": value}, fresh=set(), defined={}, program_file="<program>")

    reader = kept.KeptGlobals(str(tmp_path / "names"))
    reader.read()
    assert reader.modules == ({} if entry is None else {"z": entry})
    if entry is None:
        assert "z (a module not imported under its name)" in writer.note()
