"""A kept run waiting for the program before it, cut off by a close, raises SandboxClosed.

Two programs sent to one kept sandbox take turns: the second waits for the first on the
sandbox's lock. A close (the kept sandbox's own, or its backend's, which closes its kept
sandboxes) removes the container under the first; the lock is then handed to the second
before close() takes it. That run began before the close: it is cut off, and what it raises
says which was closed and that no retry can help (:class:`SandboxClosed`, as every other run
a close cuts off), never the :class:`UsageError` of a call made after the close, which a
harness does not expect of a tool call at shutdown. A call made after the sandbox's own close
is still a :class:`UsageError` (the caller's mistake); one made after its backend's close is
:class:`SandboxClosed` too: the caller closed nothing (a server shutting down under a
conversation).

The container is a stand-in (no Docker: the order of events is the point).
"""

from __future__ import annotations

import asyncio

import pytest

from airlock.policies import UsageError
from airlock.sandbox import SandboxClosed
from tests.sandbox.test_kept_close import _Container, _kept


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# (case, what closes, what the queued run's message names, what a call after the close raises)
CLOSES: list[tuple[str, str, str, tuple[type[Exception], str]]] = [
    ("kept_closed", "kept", "kept sandbox was closed", (UsageError, "kept sandbox is closed")),
    ("backend_closed", "backend", "backend is closed", (SandboxClosed, "backend is closed")),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("closing", "names", "after"), [c[1:] for c in CLOSES], ids=[c[0] for c in CLOSES]
)
async def test_a_queued_kept_run_cut_off_by_close_raises_sandbox_closed(
    closing: str, names: str, after: tuple[type[Exception], str]
) -> None:
    ends = asyncio.Event()
    container, backend_closed = _Container(ends=ends), [False]
    kept = _kept(container, backend_closed=lambda: backend_closed[0])
    first = asyncio.create_task(kept.run("'in flight'"))
    await asyncio.sleep(0.05)  # the first program runs now
    queued = asyncio.create_task(kept.run("'queued'"))
    await asyncio.sleep(0.05)  # the second waits for the first on the lock
    assert kept.busy
    assert container.programs == 1
    backend_closed[0] = closing == "backend"  # (the backend's close() closes its kept ones)
    closing_task = asyncio.create_task(kept.close())
    await asyncio.sleep(0)
    ends.set()  # the first program ends, its container removed under it
    await asyncio.wait_for(first, 2.0)
    with pytest.raises(SandboxClosed) as raised:
        await asyncio.wait_for(queued, 2.0)
    assert (raised.value.code, raised.value.retryable) == ("sandbox_closed", False)
    assert names in str(raised.value)
    await asyncio.wait_for(closing_task, 2.0)
    assert container.programs == 1, "the queued program did not run"
    # A call made after the close: the caller's mistake if it closed the sandbox itself.
    with pytest.raises(after[0], match=after[1]):
        await kept.run("'after close'")
