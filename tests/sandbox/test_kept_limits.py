"""In a kept (or reused) container, a limit is blamed on the program that hit it, not a later one.

The container's cgroup counters add up over all its programs; each program is judged on what
changed while it ran. Real containers, kept for a conversation and reused per principal (the
``clean`` kind): a program that hits the pids limit and carries on leaves the next program's
ordinary error an ordinary error (and the container kept); a program the OOM killer ends is
``limit_exceeded``/``memory`` and its container goes, so the next program, innocent, gets a
fresh one and its own error; and a program's peak memory is its own, not an earlier one's.
"""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator

import pytest

from airlock.bridge import ToolSession
from airlock.policies import SandboxProfile
from airlock.sandbox import DockerBackend, KeptSandbox, RunResult
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.conftest import IMAGE, require_docker

MiB = 1024 * 1024
PROFILE = SandboxProfile(language_mode="full", timeout_s=10, memory_bytes=256 * MiB)

# Starts threads until the pids limit refuses one, catches that, and ends well.
HITS_PIDS_AND_CARRIES_ON = textwrap.dedent("""
    import threading, time
    release = threading.Event()
    started = 0
    try:
        while True:
            threading.Thread(target=release.wait).start()
            started += 1
    except RuntimeError:
        refused = True
    release.set()
    time.sleep(0.2)
    [started, refused]
""")
MEMORY_HOG = "x = bytearray(400 * 1024 * 1024)\n'unreachable'"
BIG_AND_FINE = "x = bytearray(150 * 1024 * 1024)\ndel x\n'fine'"
INNOCENT = "raise KeyError('innocent')"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def backend() -> AsyncIterator[DockerBackend]:
    require_docker()
    backend = DockerBackend(image=IMAGE, profile=PROFILE, pool_size=0)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


def _session() -> ToolSession:
    return ToolSession(registry=build_registry(), principal=ALICE, grant=GRANT)


class _Conversation:
    """Programs of one principal in one container: a kept sandbox's, or reused ones."""

    def __init__(self, backend: DockerBackend, kind: str) -> None:
        self.backend = backend
        self.kept: KeptSandbox | None = backend.keep(ALICE) if kind == "kept" else None
        backend.reuse = kind == "reused"

    async def run(self, program: str) -> RunResult:
        if self.kept is not None:
            return await self.kept.run(program, tools=_session())
        return await self.backend.run(program, tools=_session())

    @property
    def starts(self) -> int:
        """Containers started for the conversation so far."""
        kept = self.kept or self.backend._reused._held[(ALICE.user_id, ALICE.tenant_id)]
        return kept.starts


KINDS = ["kept", "reused"]


def _is_innocent(result: RunResult) -> bool:
    return (
        result.status == "error"
        and result.limit is None
        and result.error is not None
        and result.error.type == "KeyError"
    )


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_pids_limit_an_earlier_program_hit_is_not_the_next_ones(
    backend: DockerBackend, kind: str
) -> None:
    conversation = _Conversation(backend, kind)
    first = await conversation.run(HITS_PIDS_AND_CARRIES_ON)
    assert first.status == "ok", first
    assert first.value is not None
    assert first.value[1] is True, "the program hit the pids limit"
    second = await conversation.run(INNOCENT)
    assert _is_innocent(second), second
    assert conversation.starts == 1, "nothing was dropped: the same container ran both"


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_program_the_oom_killer_ends_is_a_memory_limit_and_its_container_goes(
    backend: DockerBackend, kind: str
) -> None:
    conversation = _Conversation(backend, kind)
    warm = await conversation.run("'warm'")
    assert warm.status == "ok", warm
    hog = await conversation.run(MEMORY_HOG)
    assert (hog.status, hog.limit) == ("limit_exceeded", "memory"), hog
    assert hog.error is not None
    assert hog.error.type == "LimitExceeded"
    assert "256.0 MiB" in hog.error.message
    innocent = await conversation.run(INNOCENT)
    assert _is_innocent(innocent), innocent
    assert conversation.starts == 2, "the hog's container went; the next program had a new one"


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_kept_programs_peak_memory_is_its_own(backend: DockerBackend) -> None:
    conversation = _Conversation(backend, "kept")
    big = await conversation.run(BIG_AND_FINE)
    assert big.status == "ok", big
    small = await conversation.run(INNOCENT)
    assert _is_innocent(small), small
    # The container's high-water mark is the big program's; the small one's peak is its own
    # (cgroup v1 restarts the mark per program) or not reported from the cgroup (v2).
    assert small.peak_memory_bytes is None or small.peak_memory_bytes < 100 * MiB, small
    assert conversation.starts == 1
