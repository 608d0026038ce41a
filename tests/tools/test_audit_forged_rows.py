"""A row edited behind the audit store's back (a column that no longer decodes) is refused
with the store's typed error naming its record, never a decoding traceback: ``airlock
audit show`` and ``export`` then print it and exit 2, and ``audit verify`` names the first
changed record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airlock.tools import SQLiteAuditStore
from airlock.tools._audit_chain import AuditStoreError
from airlock.tools._audit_schema import event_of_row, row_of
from tests.audit_events import stored_event
from tests.tools.stores import run_sql

# name -> (column index in COLUMNS, the forged value, what the error says of it)
FORGED: dict[str, tuple[int, Any, str]] = {
    "effects not JSON": (14, "{", "effects"),
    "effects not a list": (14, "5", "effects"),
    "effects an object": (14, '{"a": 1}', "effects"),
    "time not a number": (0, "abc", "ts"),
    "time missing": (0, None, "ts"),
    "duration not a number": (13, "1.5s", "duration_s"),
    "duration as bytes": (13, b"\xff", "duration_s"),
}


@pytest.mark.parametrize("name", sorted(FORGED))
def test_a_row_that_does_not_decode_is_refused_naming_its_record(name: str) -> None:
    index, value, column = FORGED[name]
    row = list(row_of(stored_event(run_id="r\x1b9", call_id="c7")))
    row[index] = value
    with pytest.raises(AuditStoreError) as caught:
        event_of_row(row)
    message = str(caught.value)
    assert caught.value.code == "audit_store"
    assert f"its {column} " in message
    assert "run 'r\\x1b9', call 'c7'" in message  # (escaped: it is the forger's text)
    assert "airlock audit verify" in message


def test_a_row_that_decodes_is_read_as_it_was_written() -> None:
    event = stored_event(effects=("read(a:b)", "spend(5 USD)"))
    assert event_of_row(row_of(event)) == event


@pytest.mark.parametrize(
    ("column", "value"), [("effects", "'{'"), ("effects", "'7'"), ("ts", "'abc'")]
)
def test_each_reader_of_a_forged_sqlite_store_refuses_it(
    tmp_path: Path, column: str, value: str
) -> None:
    store = SQLiteAuditStore(tmp_path / "audit.db")
    store.append([stored_event(call_id=f"c{i}") for i in range(3)])
    store.close()
    run_sql(str(tmp_path / "audit.db"), f"UPDATE audit_events SET {column} = {value} WHERE id = 2")
    store = SQLiteAuditStore(tmp_path / "audit.db", readonly=True)
    try:
        with pytest.raises(AuditStoreError, match="call 'c1'"):
            list(store.records())
        with pytest.raises(AuditStoreError, match="call 'c1'"):
            store.query(run_id="r1")
        report = store.verify()
        assert (report.ok, report.record) == (False, 2)
    finally:
        store.close()
