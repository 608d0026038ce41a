"""A run's audit events are stored before its result is handed on: by the bridge, unless the
session says its caller waits for the log itself (``ToolSession.durable_by_caller``, as a
harness does before every answer). The store here takes nothing until its gate opens."""

from __future__ import annotations

import asyncio

import pytest

from airlock.bridge import ToolSession, encode_frame
from airlock.tools import AuditLog, Registry
from tests.bridge.records import ALICE, GRANT
from tests.bridge.test_fuzz import _results, serving
from tests.tools.test_audit import GatedStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# (case, the session's caller waits for the log, whether the run ends before the store
# has taken its events)
CASES = [
    ("the bridge waits", False, False),
    ("its caller waits", True, True),
]


@pytest.mark.parametrize(("case", "by_caller", "ends_first"), CASES, ids=[c[0] for c in CASES])
async def test_a_run_ends_once_its_events_are_stored_unless_its_caller_waits(
    case: str, by_caller: bool, ends_first: bool
) -> None:
    store = GatedStore()
    audit = AuditLog(store)
    session = ToolSession(
        registry=Registry(audit=audit), principal=ALICE, grant=GRANT, durable_by_caller=by_caller
    )
    store.gate.clear()
    reader = asyncio.StreamReader()
    served, writer = serving(reader, session, max_done_bytes=1 << 20)
    try:
        # A call of a tool the registry does not have: refused, and recorded as such.
        reader.feed_data(encode_frame({"type": "call", "id": 1, "tool": "nope", "args": {}}))
        async with asyncio.timeout(10):
            while not _results(writer):
                await asyncio.sleep(0.01)
        reader.feed_data(encode_frame({"type": "done", "result": {}}))
        reader.feed_eof()
        ended, _ = await asyncio.wait({served}, timeout=1.0)
        assert bool(ended) is ends_first, case
        assert audit.pending > 0  # nothing was stored meanwhile
    finally:
        store.gate.set()
    assert await served == {"type": "done", "result": {}}
    await audit.wait_durable()
    assert [e.tool for e in audit.events(run_id=session.run_id)] == ["nope"]
    audit.close()
