"""A program's answer is given once its records are stored: the bridge leaves that wait to the
session (``ToolSession.durable_by_caller``), which waits before every answer. Here a real
container runs a program that calls a tool while the audit store takes nothing: the program
runs to its end, and its answer waits until the store has its records."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from airlock.harness import Harness
from airlock.policies import Principal, SandboxProfile, parse_policy, read
from airlock.sandbox import DockerBackend
from airlock.tools import AuditEvent, CallContext, Registry
from tests.conftest import IMAGE, require_docker
from tests.tools.test_audit import GatedStore

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"notes.read"}))
POLICY = """version = 1
[roles.reader]
scopes = ["notes.read"]
effects = ["read(notes:note/*)"]
[principals.alice]
roles = ["reader"]
"""
PROGRAM = 'tools.notes_note_get(n=7)["n"]'


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Note(BaseModel):
    n: int


class ClosedStore(GatedStore):
    """Takes nothing while its gate is closed (for as long as a test needs)."""

    def append(
        self, events: Sequence[AuditEvent], programs: Mapping[str, str] | None = None
    ) -> None:
        self.gate.wait(120)
        super().append(events, programs)


def _registry(handled: list[int]) -> Registry:
    registry = Registry()

    @registry.tool(effects=[read("notes:note/{n}")], scope="notes.read", callers={"direct", "code"})
    async def notes_note_get(ctx: CallContext, n: Annotated[int, Field(ge=0, le=100)]) -> Note:
        """Fetch one note by its number. Use it in tests of the audit log.
        It returns nothing else."""
        handled.append(n)
        return Note(n=n)

    return registry


async def test_a_programs_answer_waits_until_its_records_are_stored(tmp_path: Path) -> None:
    require_docker()
    handled: list[int] = []
    store = ClosedStore()
    backend = DockerBackend(image=IMAGE, profile=SandboxProfile(language_mode="full"), pool_size=1)
    async with backend:
        harness = Harness(
            _registry(handled),
            parse_policy(POLICY, source="durability-test"),
            backend,
            audit=store,
            artifacts=tmp_path / "store",
        )
        session = harness.session(ALICE)
        store.gate.clear()
        answer = asyncio.create_task(session.call("execute_code", {"code": PROGRAM}))
        try:
            async with asyncio.timeout(60):  # the program ran, and made its call
                while not handled:
                    await asyncio.sleep(0.05)
            done, _ = await asyncio.wait({answer}, timeout=3.0)  # its end, and then some
            assert not done, answer.result()
            assert store.batches == []
        finally:
            store.gate.set()
        result = await answer
        await session.close()
    assert json.loads(result.content)["value"] == 7, result.content
    stored = [(e.tool, e.stage) for e in store.query()]
    assert ("notes_note_get", "done") in stored
    assert ("execute_code", "done") in stored
