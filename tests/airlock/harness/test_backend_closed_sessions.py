"""A session whose backend was closed under it (a server shutting down) answers its next
``execute_code`` with a tool result, never an exception out of :meth:`Session.call`: a plain
session and a ``keep_state`` one alike, ``sandbox_unavailable``, not retryable. (A kept
sandbox closed by its backend used to refuse the call as the caller's mistake, a
``UsageError`` that escaped the call.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from airlock import Session
from airlock.policies import SandboxProfile, UsageError
from airlock.sandbox import DockerBackend
from airlock.sandbox._owner import OWNER_LABEL
from tests.airlock.session_world import ALICE, World
from tests.conftest import IMAGE, require_docker

pytestmark = pytest.mark.docker

# (case, the session's keep_state)
SESSIONS = [("plain", False), ("kept", True)]


@asynccontextmanager
async def _ran_once(
    root: Path, keep_state: bool, program: str
) -> AsyncIterator[tuple[DockerBackend, Session]]:
    """A session of a backend of its own that ran ``program`` once; all closed after."""
    require_docker()
    backend = DockerBackend(image=IMAGE, profile=SandboxProfile(timeout_s=10))
    await backend.start()
    world = World(root, backend)
    session = world.session(ALICE, keep_state=keep_state)
    try:
        first = await session.call("execute_code", {"code": program})
        assert not first.is_error, first.content
        yield backend, session
    finally:
        await session.close()
        await backend.close()
        world.close()


@pytest.mark.anyio
@pytest.mark.parametrize("keep_state", [s[1] for s in SESSIONS], ids=[s[0] for s in SESSIONS])
async def test_a_session_whose_backend_closed_answers_sandbox_unavailable(
    tmp_path: Path, keep_state: bool
) -> None:
    async with _ran_once(tmp_path, keep_state, "x = 1\n2") as (backend, session):
        await backend.close()

        answer = await session.call("execute_code", {"code": "3"})

        assert (answer.code, answer.retryable) == ("sandbox_unavailable", False)
        assert json.loads(answer.content)["error"] == "sandbox_unavailable"


@pytest.mark.anyio
@pytest.mark.parametrize("keep_state", [s[1] for s in SESSIONS], ids=[s[0] for s in SESSIONS])
async def test_a_closed_session_refuses_its_next_call_and_starts_no_container(
    tmp_path: Path, keep_state: bool
) -> None:
    """The session was closed by its application, not its backend: a call after it is the
    application's mistake (a kept session's next call used to start a new container, its
    earlier names gone, that nothing would close)."""
    async with _ran_once(tmp_path, keep_state, "x = 41\nx + 1") as (backend, session):
        await session.close()
        mine = {"label": f"{OWNER_LABEL}={backend._owner}"}
        before = backend.client.containers.list(all=True, filters=mine)

        with pytest.raises(UsageError, match="this session is closed"):
            await session.call("execute_code", {"code": "x"})
        with pytest.raises(UsageError, match="this session is closed"):
            await session.execute_code("x")

        after = backend.client.containers.list(all=True, filters=mine)
        assert [c.id for c in after] == [c.id for c in before]
        # (a second close, by _ran_once, is harmless)


@pytest.mark.anyio
@pytest.mark.parametrize("yields", [1, 2, 5])  # (with none, the call is after close)
async def test_a_first_program_admitted_as_its_session_closes_leaves_no_container(
    tmp_path: Path, yields: int
) -> None:
    """A kept session's first program, admitted but not yet in a container when the
    session closes, starts none: it is answered ``sandbox_unavailable``, and no container
    of the backend's is left (one used to start that nothing would close, until its idle
    timeout)."""
    require_docker()
    backend = DockerBackend(image=IMAGE, profile=SandboxProfile(timeout_s=10), pool_size=0)
    await backend.start()
    world = World(tmp_path, backend)
    mine = {"label": f"{OWNER_LABEL}={backend._owner}"}
    try:
        session = world.session(ALICE, keep_state=True)
        call = asyncio.ensure_future(session.call("execute_code", {"code": "x = 1\nx"}))
        for _ in range(yields):
            await asyncio.sleep(0)
        await session.close()

        answer = await asyncio.wait_for(call, 30)

        assert (answer.code, answer.retryable) == ("sandbox_unavailable", False), answer
        assert backend.client.containers.list(all=True, filters=mine) == []
    finally:
        await backend.close()
        world.close()
