"""What a kept session carries from one program to the next, read back without running code.

The guest's ``airlock_kept`` on the host: plain data comes back, anything that would need a
class or function to rebuild is refused; a ``def`` is kept only when defining it again runs
nothing (no decorators, literal defaults); a damaged file leaves nothing kept.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import os
import pickle
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.guest_image import load_guest

kept = load_guest("airlock_kept")
kept_file = load_guest("airlock_kept_file")


class _Runs:
    """Pickles to a call of ``os.system``: what a hostile program would write."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("echo crossed > /dev/null",))


PLAIN = [
    None,
    True,
    3,
    2.5,
    1j,
    "text",
    b"bytes",
    bytearray(b"x"),
    [1, [2, 3]],
    (1, "a"),
    {"a": {1, 2}},
    frozenset({1}),
    collections.OrderedDict(a=1),
    collections.Counter("aab"),
    collections.defaultdict(list, {"a": [1]}),
    collections.deque([1, 2]),
    datetime.date(2026, 12, 3),
    datetime.datetime(2026, 12, 3, 10, tzinfo=datetime.UTC),
    datetime.timedelta(seconds=3),
    decimal.Decimal("1.10"),
]

NOT_PLAIN = [
    _Runs(),
    object(),
    len,
    lambda: 1,
    [1, object()],
    {"a": _Runs()},
    collections.defaultdict(lambda: 1),
]

HOSTILE = [
    pickle.dumps(_Runs()),
    pickle.dumps(_Runs(), protocol=0),
    b"cos\nsystem\n(S'echo crossed'\ntR.",
    b"cbuiltins\neval\n(S'1'\ntR.",
    pickle.dumps(collections.defaultdict(print)),
]


@pytest.mark.parametrize("value", PLAIN, ids=lambda v: type(v).__name__)
def test_plain_data_comes_back(value: object) -> None:
    assert kept.is_plain(value)
    assert kept.loads_data(pickle.dumps(value, protocol=5)) == value


@pytest.mark.parametrize("value", NOT_PLAIN, ids=lambda v: type(v).__name__)
def test_other_values_are_not_plain(value: object) -> None:
    assert not kept.is_plain(value)


@pytest.mark.parametrize("data", HOSTILE, ids=range(len(HOSTILE)))
def test_a_pickle_that_would_run_code_is_refused(data: bytes) -> None:
    with pytest.raises(pickle.UnpicklingError, match="is not plain data"):
        kept.loads_data(data)


DEFINITIONS = [
    ("def f(x, y=2):\n    return x + y", True),
    ("async def f(x=-1, *, y=None):\n    return x", True),
    ("def f(x: int = 1) -> int:\n    return x", True),  # annotations dropped
    ("@tools.records_item_get\ndef f():\n    pass", False),
    ("def f(x=tools.records_item_get(record_id='rec_1')):\n    return x", False),
    ("def f(x=[]):\n    return x", False),
    ("class C:\n    pass", False),
]


@pytest.mark.parametrize(("source", "keepable"), DEFINITIONS)
def test_a_definition_is_kept_only_when_defining_it_runs_nothing(
    source: str, keepable: bool
) -> None:
    found = kept.top_level_definitions(source)
    assert (found != {}) is keepable, found
    if keepable:
        assert "int" not in found["f"][1]  # annotations are evaluated: never kept


def test_names_round_trip_and_a_damaged_file_keeps_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "globals")
    source = "import json\nfrom math import sqrt\nrows = [1, 2]\ndef total(xs):\n    return sum(xs)"
    namespace: dict[str, Any] = {"__builtins__": __builtins__}
    fresh = set(namespace)
    exec(compile(source, "<program>", "exec"), namespace)
    namespace["thing"] = object()
    writer = kept.KeptGlobals(path)
    writer.keep(
        namespace,
        fresh=fresh,
        defined=kept.top_level_definitions(source),
        program_file="<program>",
    )
    assert "thing (object)" in writer.note()

    reader = kept.KeptGlobals(path)
    reader.read()
    again: dict[str, Any] = {"__builtins__": __builtins__}
    reader.restore(again, lambda text: compile(text, "<program>", "exec"))
    assert again["rows"] == [1, 2]
    assert again["total"](again["rows"]) == 3
    assert again["sqrt"](16) == 4.0
    assert again["json"].dumps(1) == "1"
    assert "thing" not in again

    Path(path).write_bytes(kept_file.encode_names({"x": pickle.dumps(_Runs())}, {}, {}))
    damaged = kept.KeptGlobals(path)
    damaged.read()
    out: dict[str, Any] = {"__builtins__": __builtins__}
    damaged.restore(out, lambda text: compile(text, "<program>", "exec"))
    assert "x" not in out
    Path(path).write_bytes(pickle.dumps(_Runs()))
    broken = kept.KeptGlobals(path)
    broken.read()
    assert "could not be read" in broken.note()


def _link_to_names(path: Path) -> None:
    (path.parent / "names").write_bytes(kept_file.encode_names({"x": pickle.dumps(1)}, {}, {}))
    path.symlink_to(path.parent / "names")


def _link_to_pipe(path: Path) -> None:
    os.mkfifo(path.parent / "pipe")
    path.symlink_to(path.parent / "pipe")


def _directory(path: Path) -> None:
    path.mkdir()
    (path / "inside").write_bytes(b"x")


def _too_large(path: Path) -> None:
    path.write_bytes(b"x" * (_LIMIT + 1))


_LIMIT = 1000
NOT_THE_NAMES: list[tuple[str, Any, str]] = [
    ("link to a file of names", _link_to_names, "a link, not a file"),
    ("link to a pipe", _link_to_pipe, "a link, not a file"),
    ("pipe", lambda path: os.mkfifo(path), "not a regular file"),
    ("directory", _directory, "not a regular file"),
    ("file over the limit", _too_large, "over 1,000 bytes"),
]
"""What a program may leave where the kept names should be, and what the next one is told."""


@pytest.mark.parametrize(
    ("leave", "reason"), [case[1:] for case in NOT_THE_NAMES], ids=[c[0] for c in NOT_THE_NAMES]
)
def test_what_stands_in_place_of_the_names_is_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, leave: Any, reason: str
) -> None:
    monkeypatch.setattr(kept, "MAX_KEPT_BYTES", _LIMIT)
    path = tmp_path / "globals"
    leave(path)
    reader = kept.KeptGlobals(str(path))

    # In a thread: a reader that waited on a pipe would hold the test, not end it.
    reading = threading.Thread(target=reader.read, daemon=True)
    reading.start()
    reading.join(5)

    assert not reading.is_alive(), "the read waited on what stands there"
    assert reader.notes == [f"the kept names could not be read ({reason})"]
    assert (reader.data, reader.functions, reader.modules) == ({}, {}, {})


LEFT_IN_THE_WAY: list[tuple[str, Any]] = [
    ("directory at the temporary", lambda path: _directory(Path(kept_file.temporary_file(path)))),
    ("file at the temporary", lambda path: Path(kept_file.temporary_file(path)).write_bytes(b"x")),
    ("link at the temporary", lambda path: _link_to_names(Path(kept_file.temporary_file(path)))),
    ("directory at the names", lambda path: _directory(Path(path))),
    ("link at the names", lambda path: _link_to_names(Path(path))),
    ("pipe at the names", lambda path: os.mkfifo(path)),
]


@pytest.mark.parametrize(
    "leave", [c[1] for c in LEFT_IN_THE_WAY], ids=[c[0] for c in LEFT_IN_THE_WAY]
)
def test_the_way_is_cleared_for_the_next_names(tmp_path: Path, leave: Any) -> None:
    path = str(tmp_path / "globals")
    leave(path)

    kept_file.clear_way(path)

    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["names"], ["pipe"])
    writer = kept.KeptGlobals(path)
    writer.keep({"n": 7}, fresh=set(), defined={}, program_file="<program>")
    reader = kept.KeptGlobals(path)
    reader.read()
    assert (reader.notes, reader.data) == ([], {"n": pickle.dumps(7, protocol=5)})


def test_the_names_file_is_left_when_it_is_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "globals"
    path.write_bytes(b"whatever a program wrote")

    kept_file.clear_way(str(path))

    assert path.read_bytes() == b"whatever a program wrote"


def test_data_over_the_limit_is_not_kept_and_the_rest_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kept, "MAX_KEPT_BYTES", _LIMIT)
    path = str(tmp_path / "globals")
    namespace: dict[str, Any] = {"__builtins__": __builtins__}
    fresh = set(namespace)
    exec("import json\nrows = 'x' * 2000", namespace)
    writer = kept.KeptGlobals(path)

    writer.keep(namespace, fresh=fresh, defined={}, program_file="<program>")

    assert "rows (with the other data, over 1,000 bytes)" in writer.note()
    reader = kept.KeptGlobals(path)
    reader.read()
    assert (reader.data, reader.modules) == ({}, {"json": "json"})


_HASH_MODULUS = (1 << 61) - 1


def colliding_integers(count: int) -> bytes:
    """A pickle of a dictionary whose ``count`` integer keys all hash alike, written without
    building it: loading it takes time that grows with the square of ``count``."""
    parts = [b"\x80\x02}("]
    for n in range(1, count):
        key = n * _HASH_MODULUS
        encoded = key.to_bytes((key.bit_length() + 8) // 8, "little", signed=True)
        parts.append(b"\x8a" + bytes([len(encoded)]) + encoded + b"N")
    return b"".join(parts) + b"u."


def test_the_names_file_is_not_unpickled_whatever_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "globals"
    path.write_bytes(colliding_integers(4000))
    reader = kept.KeptGlobals(str(path))

    reader.read()

    assert reader.notes == ["the kept names could not be read (ValueError)"]
    assert (reader.data, reader.functions, reader.modules) == ({}, {}, {})


def test_names_of_every_kind_come_back_as_they_were_kept() -> None:
    data = {"rows": pickle.dumps([1, 2]), "\ud800": b"", "x" * 70_000: b"\x00" * 300}
    functions = {"total": "def total(xs):\n    return sum(xs)\n", "é": "def é():\n    pass\n"}
    modules = {"json": "json", "sqrt": "math:sqrt"}

    blob = kept_file.encode_names(data, functions, modules)

    assert kept_file.decode_names(blob) == (data, functions, modules)


DAMAGED: list[tuple[str, Any, str]] = [
    ("no header", lambda blob: blob[1:], "not a file of kept names"),
    ("a length cut", lambda blob: blob[:-6], "cut short"),
    ("a value cut", lambda blob: blob[:-1], "cut short"),
    ("a kind unknown", lambda blob: blob.replace(b"\nd", b"\nz", 1), "no kind of kept name"),
    ("a length past the end", lambda blob: blob + b"d\xff\xff\xff\xff", "cut short"),
]


@pytest.mark.parametrize(("damage", "error"), [c[1:] for c in DAMAGED], ids=[c[0] for c in DAMAGED])
def test_a_damaged_file_of_names_is_refused(damage: Any, error: str) -> None:
    blob = kept_file.encode_names({"rows": pickle.dumps([1, 2])}, {}, {"json": "json"})

    with pytest.raises(ValueError, match=error):
        kept_file.decode_names(damage(blob))


def test_a_key_that_is_not_a_name_is_left_out_and_said(tmp_path: Path) -> None:
    path = str(tmp_path / "globals")
    writer = kept.KeptGlobals(path)

    writer.keep({1: 2, "n": 7}, fresh=set(), defined={}, program_file="<program>")

    assert "1 (not a name)" in writer.note()
    reader = kept.KeptGlobals(path)
    reader.read()
    assert reader.data == {"n": pickle.dumps(7, protocol=5)}
