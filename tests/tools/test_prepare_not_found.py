"""Another tenant's record reads exactly like a missing one, from a read handler and from a
write tool's ``prepare`` alike: whatever text a ``NotFoundError`` carries, the model gets one
standard answer (the text goes to the operator's detail)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pytest
from pydantic import BaseModel, ConfigDict, Field

from airlock.policies import Grant, Principal, read, write
from airlock.tools import (
    CallContext,
    NotFoundError,
    Registry,
    SQLiteLedgerStore,
    ToolError,
    WritePath,
    write_tool,
)

pytestmark = pytest.mark.anyio

OWNERS = {"n_1": "acme", "n_9": "globex"}
NoteId = Annotated[str, Field(max_length=20)]
ACME = Principal(user_id="u", tenant_id="acme", scopes=frozenset({"notes.write"}))
GRANT = Grant(
    scopes=frozenset({"notes.write"}), effects=(write("notes:note/*"), read("notes:note/*"))
)


class ArchiveArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    note_id: NoteId


class Archive(BaseModel):
    note_id: str


class Note(BaseModel):
    note_id: str


def _find(note_id: str, tenant: str) -> None:
    """The record-level check as a tool author may well write it: saying why."""
    owner = OWNERS.get(note_id)
    if owner is None:
        raise NotFoundError()
    if owner != tenant:
        raise NotFoundError(f"note {note_id} belongs to another tenant", detail="owner check")


def _registry() -> Registry:
    registry = Registry()

    def prepare(args: ArchiveArgs, principal: Principal) -> Archive:
        _find(args.note_id, principal.tenant_id)
        return Archive(note_id=args.note_id)

    registry.register(
        write_tool(
            name="notes_note_archive",
            description="Archive one note. Use it to clean up. It returns a receipt only.",
            input_model=ArchiveArgs,
            effect_model=Archive,
            receipt_model=Note,
            prepare=prepare,
            commit=lambda effect, key: {"note_id": effect.note_id},
            effects=[write("notes:note/{note_id}")],
            scope="notes.write",
        )
    )

    @registry.tool(
        effects=[read("notes:note/{note_id}")],
        scope="notes.write",
        description="Read one note. Use it to look. It returns the id only.",
    )
    def notes_note_get(ctx: CallContext, note_id: NoteId) -> Note:
        _find(note_id, ctx.principal.tenant_id)
        return Note(note_id=note_id)

    return registry


async def _answer(tmp_path: Path, tool: str, note_id: str) -> tuple[object, ...]:
    registry = _registry()
    ledger = SQLiteLedgerStore(tmp_path / f"{tool}-{note_id}.db")
    writes = WritePath(registry, ledger)
    ctx = CallContext(principal=ACME, grant=GRANT, run_id="r", caller="direct")
    try:
        with pytest.raises(ToolError) as caught:
            await writes.call(tool, {"note_id": note_id}, ctx)
    finally:
        ledger.close()
    error = caught.value
    (event,) = registry.audit.events()
    return error.code, error.message, error.retryable, error.outcome, event.outcome, event.code


@pytest.mark.parametrize("tool", ["notes_note_get", "notes_note_archive"])
async def test_another_tenant_s_record_answers_as_a_missing_one(tmp_path: Path, tool: str) -> None:
    missing = await _answer(tmp_path, tool, "n_missing")
    elsewhere = await _answer(tmp_path, tool, "n_9")

    assert missing == elsewhere
    assert missing[0] == "not_found"


async def test_the_read_and_the_write_answer_alike(tmp_path: Path) -> None:
    read_answer = await _answer(tmp_path, "notes_note_get", "n_9")
    write_answer = await _answer(tmp_path, "notes_note_archive", "n_9")

    assert read_answer[:4] == write_answer[:4]
