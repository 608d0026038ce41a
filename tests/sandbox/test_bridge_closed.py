"""A program that shuts down or closes its end of the bridge: judged by its deadline.

The bridge ending without a ``done`` frame is not proof that the runner died: the program
holds the socket's descriptor and may shut it down, or close it, and go on. The host then
asks the engine whether the runner exited, in short calls and never past the run's deadline:
a runner that exited is ``RunnerDied`` (as before), one still running at the deadline is a
``timeout`` (and its container goes), one still running well before it is a
``protocol_error`` that says the bridge was closed from inside.
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from airlock.policies import SandboxProfile
from airlock.sandbox import DockerBackend
from tests.bridge.records import ALICE
from tests.conftest import IMAGE, require_docker

pytestmark = pytest.mark.docker

DEADLINE_S = 3.0
MARGIN_S = 1.5
"""How long after the deadline a run whose program closed the bridge may return."""
FULL = SandboxProfile(language_mode="full", timeout_s=DEADLINE_S)

_FIND_BRIDGE = textwrap.dedent("""
    import os, socket, stat, time
    def _is_socket(fd):
        try:
            return stat.S_ISSOCK(os.fstat(fd).st_mode)
        except OSError:
            return False
    bridge = socket.socket(fileno=next(fd for fd in range(1024) if _is_socket(fd)))
""")
SHUT = "bridge.shutdown(socket.SHUT_WR)"
CLOSE = "bridge.close()"
SPIN = "while True:\n    pass"
SLEEP = "time.sleep(60)"

# (case, when the program ends its side (s), how, what it does next, status, error type,
#  the latest it may return (s))
CLOSED = [
    ("shut_then_spin", 0.0, SHUT, SPIN, "protocol_error", "ProtocolError", DEADLINE_S),
    ("closed_then_spin", 0.0, CLOSE, SPIN, "protocol_error", "ProtocolError", DEADLINE_S),
    ("shut_then_sleep", 0.0, SHUT, SLEEP, "protocol_error", "ProtocolError", DEADLINE_S),
    ("closed_then_sleep", 0.5, CLOSE, SLEEP, "protocol_error", "ProtocolError", DEADLINE_S),
    (
        "shut_by_the_deadline_then_spin",
        2.9,
        SHUT,
        SPIN,
        "limit_exceeded",
        "LimitExceeded",
        DEADLINE_S + MARGIN_S,
    ),
    (
        "closed_by_the_deadline_then_sleep",
        2.5,
        CLOSE,
        SLEEP,
        "limit_exceeded",
        "LimitExceeded",
        DEADLINE_S + MARGIN_S,
    ),
    # The runner cannot report on a socket shut down under it and exits: it did die.
    ("shut_then_return", 0.0, SHUT, "1", "error", "RunnerDied", DEADLINE_S),
    # The bridge ends because its runner went: as before.
    ("runner_exits", 0.0, "pass", "os._exit(0)", "error", "RunnerDied", DEADLINE_S),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def backend() -> AsyncIterator[DockerBackend]:
    require_docker()
    backend = DockerBackend(image=IMAGE, profile=FULL, pool_size=1)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


def _program(at_s: float, how: str, then: str) -> str:
    return _FIND_BRIDGE + f"time.sleep({at_s})\n{how}\n{then}\n"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("case", "at_s", "how", "then", "status", "error_type", "latest_s"),
    CLOSED,
    ids=[row[0] for row in CLOSED],
)
async def test_a_program_that_ends_its_side_of_the_bridge_is_judged_by_its_deadline(
    backend: DockerBackend,
    case: str,
    at_s: float,
    how: str,
    then: str,
    status: str,
    error_type: str,
    latest_s: float,
) -> None:
    await backend.pool.wait_ready(1)
    began = time.monotonic()
    result = await asyncio.wait_for(backend.run(_program(at_s, how, then)), 30)
    took = time.monotonic() - began
    assert result.error is not None, (case, result)
    assert (result.status, result.error.type) == (status, error_type), (case, result)
    if status == "limit_exceeded":
        assert result.limit == "timeout", (case, result)
    if status == "protocol_error":
        assert "closed or shut down its end of the bridge" in result.error.message
    assert took <= latest_s, (case, took)


@pytest.mark.anyio
async def test_a_kept_program_that_shuts_its_connection_is_ended_and_the_next_one_runs(
    backend: DockerBackend,
) -> None:
    """A kept program has a connection of its own, its runner (the zygote) another: the run
    ends at once, the zygote ends the program's process, and the conversation goes on."""
    kept = backend.keep(ALICE, idle_timeout=60)
    try:
        began = time.monotonic()
        result = await asyncio.wait_for(kept.run(_program(0.0, SHUT, SPIN)), 30)
        assert time.monotonic() - began <= DEADLINE_S
        assert result.error is not None, result
        assert (result.status, result.error.type) == ("error", "ProgramExited"), result
        assert "closed its end of the bridge" in result.error.message
        following = await asyncio.wait_for(kept.run("import os\nlen(os.listdir('/proc'))\n"), 30)
        assert following.status == "ok", following
    finally:
        await kept.close()


HOSTILE = _FIND_BRIDGE + f"{SHUT}\n{SLEEP}\n"


def test_judging_a_closed_bridge_holds_no_thread_of_the_default_executor() -> None:
    """Two runs judged at once under a default executor of two threads: other work that
    needs a thread (frame decoding, artifacts, launches) still gets one at once."""
    require_docker()

    async def main() -> tuple[float, list[str]]:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=2))
        profile = FULL.model_copy(update={"timeout_s": 20.0})
        async with DockerBackend(image=IMAGE, profile=profile, pool_size=2) as backend:
            await backend.pool.wait_ready(2)
            backend.pool.size = 0  # no launch (which holds a thread) while the probe runs
            runs = [asyncio.create_task(backend.run(HOSTILE)) for _ in range(2)]
            await asyncio.sleep(0.6)  # both programs have shut their side: both are judged
            worst = 0.0
            for _ in range(10):
                asked = time.monotonic()
                await asyncio.to_thread(time.sleep, 0.0)
                worst = max(worst, time.monotonic() - asked)
                await asyncio.sleep(0.05)
            return worst, [result.status for result in await asyncio.gather(*runs)]

    worst, statuses = asyncio.run(main())
    assert worst < 0.5, f"a thread of the default executor came after {worst:.2f} s"
    assert statuses == ["protocol_error"] * 2
