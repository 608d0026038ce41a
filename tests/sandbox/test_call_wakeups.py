"""A call from a program wakes each side once: the host when the call comes, the program when
its result does.

- The host reads a run's socket in the callbacks of its event loop and answers a call that
  does not wait in the turn that received it (``airlock.bridge._inbox``). A run in a fresh
  container is served on the runner's control connection, which a watch of its end stands in
  front of (``airlock.sandbox._runner_end``); the inbox once took no such connection over, and
  each call of such a run woke the run's task and then the task running calls: two more turns
  of the loop, and about 15 us more of the host's CPU a call.
- A process asleep in ``recv()`` on a Unix socket is woken each time its peer reads what it
  sent: the room made wakes every waiter of the socket, whatever it waits for. A program
  waiting for its result in ``recv()`` was so woken twice a call, once for nothing as the host
  read the call. The guest waits in ``poll()`` for bytes instead. The program counts its own
  voluntary context switches (``/proc/self/status``) over 1,000 calls, under ``runc`` and
  ``crun``: gVisor's kernel, not the host's, schedules a program's threads there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from airlock.bridge import ToolSession
from airlock.bridge._inbox import FrameInbox
from airlock.sandbox import DockerBackend
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.sandbox.runtimes import started_backend

# About 1.0 now: one wait for each result. 2.0 when the guest waited in recv().
MOST_WAITS_A_CALL = 1.3

WAITS_A_CALL = """
def waits():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
get = tools.records_item_get
for n in range(1, 51):
    get(record_id=f"rec_{n}")
before = waits()
for n in range(1000):
    get(record_id=f"rec_{n % 50 + 1}")
(waits() - before) / 1000
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["runc", "crun"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[DockerBackend]:
    async with started_backend(request.param, timeout_s=30) as backend:
        yield backend


def _tools() -> ToolSession:
    return ToolSession(registry=build_registry(), principal=ALICE, grant=GRANT)


@pytest.mark.anyio
async def test_a_call_wakes_the_program_once(backend: DockerBackend) -> None:
    result = await backend.run(WAITS_A_CALL, tools=_tools())
    assert result.ok, result
    assert result.value <= MOST_WAITS_A_CALL, (
        f"the program's process waited {result.value:.2f} times a call: it is woken for "
        "more than its results"
    )


@pytest.mark.anyio
@pytest.mark.parametrize("kept", [False, True], ids=["fresh", "kept"])
async def test_the_host_reads_every_runs_socket_in_its_callbacks(
    backend: DockerBackend, kept: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: list[bool] = []
    take_over = FrameInbox.take_over

    async def spied(self: FrameInbox, *args: object) -> bool:
        taken.append(await take_over(self, *args))  # type: ignore[arg-type]
        return taken[-1]

    monkeypatch.setattr(FrameInbox, "take_over", spied)
    program = "[tools.records_item_get(record_id=f'rec_{n}')['total'] for n in (1, 2)]"
    if kept:
        sandbox = backend.keep(ALICE, idle_timeout=60)
        try:
            results = [await sandbox.run(program, tools=_tools()) for _ in range(2)]
        finally:
            await sandbox.close()
    else:
        results = [await backend.run(program, tools=_tools())]
    assert all(r.ok and r.value == [10, 20] for r in results), results
    assert taken == [True] * len(results), "a run's frames were read by its task, not as they came"
