"""Admission judges a read's declared effects against a grant once, and its resolved effects on
every call whenever the declared ones are not covered whole: calls made one after another,
under grants that cover a tool's pattern, some of its records, or none, answer exactly as a
check of each call's own effects would (``Grant.uncovered``)."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from airlock.policies import Grant, Principal, read
from airlock.tools import AuditLog, MemoryAuditStore, Registry, RunAuthority, ToolError

NoteId = Annotated[str, Field(pattern=r"^n_[0-9]{1,4}$", max_length=6)]
ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"notes.read"}))


class Note(BaseModel):
    note_id: str


class Notes(BaseModel):
    note_ids: list[str]


def build_registry() -> Registry:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("notes:note/{note_id}")], scope="notes.read",
                   callers={"direct", "code"})  # fmt: skip
    async def notes_item_get(note_id: NoteId) -> Note:
        """Fetch one note. Use it to read a note.
        It does not return anything else."""
        return Note(note_id=note_id)

    @registry.tool(effects=[read("notes:note/{note_ids[]}")], scope="notes.read",
                   callers={"direct", "code"})  # fmt: skip
    async def notes_many_get(note_ids: Annotated[list[NoteId], Field(max_length=10)]) -> Notes:
        """Fetch several notes. Use it to read notes together.
        It does not return anything else."""
        return Notes(note_ids=note_ids)

    return registry


def grant(*patterns: str) -> Grant:
    return Grant(scopes=frozenset({"notes.read"}), effects=tuple(read(p) for p in patterns))


ONE = {"notes_item_get": "note_id", "notes_many_get": "note_ids"}
# Per grant: calls in order (tool, value) and what each answers ("ok" or an error code).
CASES = {
    "the pattern": (
        ("notes:note/*",),
        [("notes_item_get", "n_1", "ok"), ("notes_item_get", "n_2", "ok"),
         ("notes_many_get", ["n_1", "n_2"], "ok")],
    ),
    "one record": (
        ("notes:note/n_1",),
        [("notes_item_get", "n_1", "ok"), ("notes_item_get", "n_2", "denied"),
         ("notes_item_get", "n_1", "ok"), ("notes_item_get", "n_2", "denied"),
         ("notes_many_get", ["n_1"], "ok"), ("notes_many_get", ["n_1", "n_2"], "denied")],
    ),
    "a prefix": (
        ("notes:note/n_1*",),
        [("notes_item_get", "n_1", "denied"), ("notes_item_get", "n_12", "ok"),  # "*": 1 or more
         ("notes_item_get", "n_2", "denied"), ("notes_many_get", ["n_10", "n_2"], "denied")],
    ),
    "another resource": (
        ("notes:other/*",),
        [("notes_item_get", "n_1", "denied"), ("notes_many_get", [], "ok")],
    ),
    "two patterns": (
        ("notes:note/n_1", "notes:note/n_2"),
        [("notes_item_get", "n_2", "ok"), ("notes_item_get", "n_3", "denied"),
         ("notes_many_get", ["n_1", "n_2"], "ok"), ("notes_many_get", ["n_3"], "denied")],
    ),
}  # fmt: skip


async def outcome(registry: Registry, authority: RunAuthority, tool: str, value: object) -> str:
    try:
        await registry.call(tool, {ONE[tool]: value}, authority.context("code", "c"))
    except ToolError as exc:
        return exc.code
    return "ok"


@pytest.mark.anyio
@pytest.mark.parametrize("case", sorted(CASES))
async def test_each_call_answers_as_its_own_effects_do(case: str) -> None:
    patterns, calls = CASES[case]
    registry = build_registry()
    authority = RunAuthority(principal=ALICE, grant=grant(*patterns), run_id="r")
    answers = [await outcome(registry, authority, tool, value) for tool, value, _ in calls]
    assert answers == [expected for _, _, expected in calls]


@pytest.mark.anyio
async def test_a_narrower_grant_after_a_wider_one_is_judged_on_its_own() -> None:
    registry = build_registry()
    wide = RunAuthority(principal=ALICE, grant=grant("notes:note/*"), run_id="wide")
    narrow = RunAuthority(principal=ALICE, grant=grant("notes:note/n_1"), run_id="narrow")
    assert await outcome(registry, wide, "notes_item_get", "n_2") == "ok"
    assert await outcome(registry, narrow, "notes_item_get", "n_2") == "denied"
    assert await outcome(registry, wide, "notes_item_get", "n_2") == "ok"
    assert await outcome(registry, narrow, "notes_item_get", "n_1") == "ok"
