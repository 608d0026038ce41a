"""``find_calls(runs=N)`` (what ``airlock audit find --limit N`` asks): the calls of the N runs
whose last matching call is newest, and the counts of every match, the same as a search of
every record gives; only those runs' calls are built (``find --limit 1`` over 300,000 records
held every match, 448 MiB). Each test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from airlock.tools import AuditEvent, _audit_find, find_calls
from tests.tools.stores import Backend
from tests.tools.test_audit_chain import _call_event

# Forty calls of nine runs, interleaved, with concrete targets, recorded patterns, kinds
# and callers of several sorts, and times that go back now and then.
TARGETS = [
    ("read(billing:invoice/inv_{i})", "read(billing:invoice/*)"),
    ("write(billing:invoice/inv_{i})", "network(https://api.example.com/{i})"),
    ("read(crm:contact/c_{i})",),
    ("read(billing:*)", "spend(USD)"),
    (),
]


def _event(i: int) -> AuditEvent:
    return dataclasses.replace(
        _call_event(i),
        ts=1_000.0 + i - (5 if i % 7 == 0 else 0),
        run_id=f"run_{(i * 5) % 9}",
        effects=tuple(e.format(i=i) for e in TARGETS[i % len(TARGETS)]),
        outcome="preview" if i % 11 == 0 else "ok",
    )


@pytest.fixture
def filled(backend: Backend) -> Backend:
    store = backend.audit()
    store.append([_event(i) for i in range(1, 41)])
    store.close()
    return backend


QUESTIONS: list[dict[str, Any]] = [
    {},
    {"kinds": ["read"]},
    {"kinds": ["write", "network"], "caller": "code"},
    {"resource": "billing:invoice/inv_1*"},
    {"resource": "billing:invoice/*", "attempted": True},
    {"resource": "billing:**", "since": 1_012.0},
    {"resource": "crm:contact/c_2"},
    {"resource": "nothing:here"},
    {"since": 1_020.0, "until": 1_035.0},
]


def _newest(found: list[Any], runs: int) -> list[Any]:
    last: dict[str, int] = {}
    for call in found:
        last[call.run_id] = call.record
    chosen = set(sorted(last, key=last.__getitem__, reverse=True)[:runs])
    return [c for c in found if c.run_id in chosen]


def _sorted(call: Any) -> Any:
    return call._replace(matched=tuple(sorted(call.matched)))


@pytest.mark.parametrize("runs", [1, 3, 100])
@pytest.mark.parametrize("question", QUESTIONS, ids=[repr(q) for q in QUESTIONS])
def test_the_newest_runs_and_the_counts_are_those_of_every_match(
    filled: Backend, question: dict[str, Any], runs: int
) -> None:
    store = filled.audit(readonly=True)
    try:
        every = find_calls(store, **question)
        newest = find_calls(store, **question, runs=runs)
    finally:
        store.close()
    if filled.name == "postgres":  # (which gives a call's matched effects in no set order)
        assert [_sorted(c) for c in newest] == [_sorted(c) for c in _newest(every, runs)]
    else:
        assert list(newest) == _newest(every, runs)
    assert (newest.calls_found, newest.runs_found) == (
        len(every),
        len({c.run_id for c in every}),
    )


@pytest.mark.parametrize("question", QUESTIONS[:4], ids=[repr(q) for q in QUESTIONS[:4]])
def test_only_the_chosen_runs_calls_are_built(
    filled: Backend, question: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    built = [0]
    real = _audit_find.FoundCall

    class Counted(real):  # type: ignore[misc,valid-type]
        @classmethod
        def _make(cls, iterable: Any) -> Any:
            built[0] += 1
            return real._make(iterable)

    monkeypatch.setattr(_audit_find, "FoundCall", Counted)
    store = filled.audit(readonly=True)
    try:
        newest = find_calls(store, **question, runs=1)
    finally:
        store.close()
    assert newest.calls_found > len(newest)
    assert built[0] <= len(newest)
