"""An event as the audit stores write it: the row and the chain a writer computes are, byte
for byte, those of the reference encoding (:func:`row_of`, :func:`canonical`, :func:`link`)
that :func:`verify_chain` checks, for every kind of field value, in SQLite and PostgreSQL
form."""

from __future__ import annotations

import hmac
import json
import math
from pathlib import Path
from typing import Any

import pytest

from airlock.tools import AuditEvent
from airlock.tools._audit_chain import GENESIS, Linker, canonical, link, split_effect
from airlock.tools._audit_schema import encoded_row, event_of_row, row_of
from airlock.tools._audit_sql import chain_rows, encode_events
from tests.audit_events import stored_event
from tests.tools.stores import Backend, make_backend

# name -> fields over the default event; each must encode exactly as the reference does.
CASES: dict[str, dict[str, Any]] = {
    "plain": {},
    "integer time": {"ts": 100},
    "negative zero": {"ts": -0.0, "duration_s": -0.0},
    "large and tiny times": {"ts": 1e300, "duration_s": 5e-324},
    "float with many digits": {"ts": 1733250000.1234567, "duration_s": 0.1 + 0.2},
    "nan time": {"ts": math.nan},
    "infinite duration": {"duration_s": math.inf},
    "negative infinity": {"duration_s": -math.inf},
    "no effects": {"effects": ()},
    "two effects": {"effects": ("write(billing:refund/inv_1)", "spend(500 USD)")},
    "effect pattern": {"effects": ("read(billing:invoice/inv_*)",)},
    "effect without kind": {"effects": ("odd",)},
    "empty effect": {"effects": ("",)},
    "quote in effect": {"effects": ('read(a"b)',)},
    "backslash in effect": {"effects": ("read(a\\b)",)},
    "non-ASCII effect": {"effects": ("read(café)",)},
    "code": {"outcome": "error", "code": "denied"},
    "empty code": {"code": ""},
    "detail": {"detail": "upstream answered 503 on /v1/invoices"},
    "empty detail": {"detail": ""},
    "approver": {"approver": "policy:small-refunds", "final": False},
    "not exercised": {"decision": "deny", "stage": "authorize", "outcome": "error"},
    "preview": {"outcome": "preview", "code": "needs_approval"},
    "quote in tool": {"tool": 'x"y'},
    "backslash in rule": {"rule": "a\\b"},
    "slash and brackets": {"call_id": "r1:m1/[0]{1}"},
    "newline in detail": {"detail": "line 1\nline 2\ttab"},
    "control character": {"detail": "bell \x07 and escape \x1b"},
    "delete character": {"detail": "rubout \x7f"},
    "NUL in detail": {"detail": "a\x00b"},
    "NUL in tool": {"tool": "x\x00y"},
    "non-ASCII user": {"user_id": "zoë", "tenant_id": "Ωmega"},
    "astral character": {"detail": "emoji \U0001f600"},
    "lone surrogate": {"tool": "x\ud800y"},
    "surrogate in effect": {"effects": ("read(\udcff)",)},
    "NUL in effect": {"effects": ("read(a\x00b)", "network(c\x00)")},
    "line separator": {"detail": "a\u2028b"},
    "long text": {"detail": "x" * 10_000},
    "percent signs": {"detail": "%s %d %r %%", "rule": "%"},
    "braces": {"detail": "{0} {x}"},
    "effect listed twice": {"effects": ("read(a)", "read(b)", "read(a)")},
    "tab and backslash-n text": {"detail": "a\tb\\nc", "approver": "\\."},
}
# What a store cannot hold (as before this encoding): SQLite stores a NaN as NULL and -0.0
# as 0, so the chain no longer fits (clocks give neither).
UNSTORABLE = {"sqlite": {"nan time", "negative zero"}, "postgres": set[str]()}


def reference(event: AuditEvent) -> tuple[tuple[Any, ...], bytes]:
    """The row and bytes of ``event`` as ``row_of`` and the encoder make them."""
    row = row_of(event)
    return row, canonical(row)


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_event_encodes_as_the_reference_does(name: str) -> None:
    event = stored_event(**CASES[name])
    want_row, want_bytes = reference(event)
    row, tail, effects = encoded_row(event)
    assert repr(row) == repr(want_row)  # repr: NaN == NaN, and -0.0 apart from 0.0
    assert [type(v) for v in row] == [type(v) for v in want_row]
    assert b"[" + tail == want_bytes
    # What the index gets is what verify reads back from the stored column.
    assert effects == tuple(json.loads(row[14]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_chain_link_is_the_reference_hmac(name: str) -> None:
    key = bytes(range(32))
    event = stored_event(**CASES[name])
    row, tail, _ = encoded_row(event)
    assert Linker(key)(GENESIS, 7, tail) == link(key, GENESIS, (7, *row))
    assert Linker(key)(GENESIS, 7, tail) == hmac.digest(
        key, GENESIS + canonical((7, *row)), "sha256"
    )


@pytest.mark.parametrize("size", [0, 1, 32, 64, 65, 200])
def test_the_linker_is_hmac_sha256_for_keys_of_any_length(size: int) -> None:
    key = bytes(range(size % 256)) * (size // 256 + 1)
    key = key[:size]
    assert Linker(key)(b"p" * 32, 12345, b'"a",1]') == hmac.digest(
        key, b"p" * 32 + b'[12345,"a",1]', "sha256"
    )


def test_a_batch_is_chained_and_indexed_as_one_event_at_a_time() -> None:
    key = bytes(32)
    events = [stored_event(**({"call_id": f"c{i}"} | CASES[n])) for i, n in enumerate(CASES)]
    last = (41, b"\x01" * 32)
    number, chain, chained, indexed = chain_rows(Linker(key), last, encode_events(events))
    previous = b"\x01" * 32
    for offset, (event, stored) in enumerate(zip(events, chained, strict=True)):
        row = (42 + offset, *row_of(event))
        previous = link(key, previous, row)
        assert repr(stored) == repr((*row, previous))
    assert (number, chain) == (41 + len(events), previous)
    assert [r[0] for r in indexed] == [
        42 + offset for offset, event in enumerate(events) for _ in event.effects
    ]


def test_each_store_holds_every_event_as_the_reference_row_and_chain(backend: Backend) -> None:
    # What the readers get back (query, records, the effect index) and what verify checks,
    # for every case, written in one batch and then one event at a time.
    events = [
        stored_event(**({"call_id": f"c{i}"} | CASES[name]))
        for i, name in enumerate(sorted(set(CASES) - UNSTORABLE[backend.name]))
    ]
    store = backend.audit()
    store.append(events)
    for event in events:
        store.append([event])
    stored = [*events, *events]
    want = [event_of_row(reference(e)[0]) for e in stored]
    assert [repr(e) for e in store.query()] == [repr(e) for e in want]
    assert [n for n, _, _ in store.records()] == list(range(1, len(stored) + 1))
    effects = sorted(
        {
            (n, *split_effect(x))
            for n, e in enumerate(stored, 1)
            for x in json.loads(reference(e)[0][14])
        },
        key=repr,
    )
    rows = backend.sql("SELECT event_id, kind, target, prefix FROM audit_effects")
    assert sorted((tuple(r) for r in rows), key=repr) == effects
    report = store.verify()
    assert report.ok, report.detail
    assert report.records == len(stored)
    store.close()


def test_effects_with_one_index_key_keep_the_first_in_each_store(backend: Backend) -> None:
    # Two effects that split to one (kind, target) with different prefixes: the index
    # keeps the first, as SQLite's INSERT OR IGNORE does, and the batch is stored.
    store = backend.audit()
    store.append([stored_event(effects=("odd*", "(odd*)"))])
    assert [tuple(r) for r in backend.sql("SELECT kind, target, prefix FROM audit_effects")] == [
        ("", "odd*", None)
    ]
    assert len(store.query()) == 1
    store.close()


# name -> fields holding a NUL (which PostgreSQL's text refuses), over the default event.
NUL_CASES: dict[str, dict[str, Any]] = {
    "in the detail": {"detail": "a\x00b"},
    "in the tool": {"tool": "x\x00y"},
    "in the run and call": {"run_id": "\x00r", "call_id": "c\x00"},
    "in an effect": {"effects": ("read(a\x00b)", "network(c\x00)")},
    "in the code and approver": {"code": "\x00", "approver": "bob\x00", "final": False},
    "beside a lone surrogate": {"detail": "\x00\ud800\x00"},
    "only NULs": {"rule": "\x00\x00"},
}


@pytest.mark.parametrize("name", sorted(NUL_CASES))
def test_both_databases_store_and_chain_a_nul_alike(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # One key for both (the same key file): the same events must give the same records and
    # the same chain, whichever database holds them, so a log moved between them matches.
    events = [stored_event(call_id="first"), stored_event(**NUL_CASES[name])]
    events.append(stored_event(call_id="after"))
    held = {}
    for kind in ("sqlite", "postgres"):
        store = make_backend(kind, tmp_path, request).audit()
        store.append(events)
        held[kind] = [(n, repr(e), chain) for n, e, chain in store.records()]
        assert store.verify().ok
        store.close()
    assert held["sqlite"] == held["postgres"]
    stored = held["sqlite"][1][1]
    assert "\\x00" not in stored  # (the repr of a NUL)
    assert "\ufffd" in stored
