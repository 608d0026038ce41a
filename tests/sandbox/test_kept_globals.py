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
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.guest_image import load_guest

kept = load_guest("airlock_kept")


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

    Path(path).write_bytes(pickle.dumps({"data": {"x": pickle.dumps(_Runs())}}))
    damaged = kept.KeptGlobals(path)
    damaged.read()
    out: dict[str, Any] = {"__builtins__": __builtins__}
    damaged.restore(out, lambda text: compile(text, "<program>", "exec"))
    assert "x" not in out
    Path(path).write_bytes(pickle.dumps(_Runs()))
    broken = kept.KeptGlobals(path)
    broken.read()
    assert "could not be read" in broken.note()
