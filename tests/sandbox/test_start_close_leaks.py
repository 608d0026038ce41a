"""Nothing a start or a close() interrupts is left on the engine, and what it raises is true.

A container the engine creates but fails to start (no runner in the image, an OCI runtime
error, the client's timeout on an engine that starts it late) is removed before the start's
error is raised, while the backend is still open: a warm pool retrying every second would
otherwise leave one more each time. A kept sandbox closed while its container starts removes
it off the run's path, and the run returns at once (:class:`SandboxClosed`). A run that resumes just after
``close()`` began takes no warm container (close() would never see it) and raises
:class:`SandboxClosed`; so does a kept run whose runner ``close()`` cut off.

The kept sandbox's tests stand in for the container (the order of events is the point); the
others start real ones, failing their start on the real engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, TypeVar

import docker
import docker.errors
import pytest
import requests.exceptions

from airlock.policies import SandboxProfile
from airlock.sandbox import DockerBackend, RunResult, SandboxClosed, SandboxError, SandboxFailure
from airlock.sandbox import _kept as kept_module
from airlock.sandbox._container import SandboxContainer
from airlock.sandbox._inputs import resolve_inputs
from airlock.sandbox._owner import labelled_containers
from tests.bridge.records import ALICE
from tests.conftest import IMAGE, require_docker
from tests.sandbox.test_kept_close import _kept

T = TypeVar("T")
NO_RUNNER_IMAGE: Final = "airlock-base:bookworm"
"""The sandbox image's own base (``sandbox/image/build.sh``): a file system with no runner,
so the engine creates a container from it and runc fails to start it."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def host() -> Iterator[docker.DockerClient]:
    """The engine as the host sees it, apart from the backend's client."""
    require_docker()
    client = docker.from_env(timeout=30)
    yield client
    client.close()


def _real_start(real: Callable[..., Any], container: str) -> None:
    real(container)


def _refused_start(real: Callable[..., Any], container: str) -> None:
    # what dockerd answers when the OCI runtime fails to start a container
    raise docker.errors.APIError("500 Server Error: OCI runtime start failed")


def _late_start(real: Callable[..., Any], container: str) -> None:
    real(container)  # the engine starts it, but after the client gave up waiting
    raise requests.exceptions.ReadTimeout("Read timed out. (read timeout=30)")


def _client_starting(start: Callable[[Callable[..., Any], str], None]) -> tuple[
    docker.DockerClient, list[str]
]:  # fmt: skip
    """A client whose container starts go through ``start``; the ids it was asked to start."""
    client = docker.from_env(timeout=30)
    real, started = client.api.start, []

    def starting(container: str, *args: Any, **kwargs: Any) -> None:
        started.append(str(container))
        start(real, container)

    client.api.start = starting  # type: ignore[method-assign]
    return client, started


def _present(host: docker.DockerClient, owner: str) -> set[str]:
    return {str(entry["Id"]) for entry in labelled_containers(host, owner=owner)}


# (case, image, the start, the code the run raises, retryable: as before the removal)
START_FAILURES = [
    ("no_runner_in_image", NO_RUNNER_IMAGE, _real_start, "sandbox_refused", False),
    ("start_refused", IMAGE, _refused_start, "sandbox_failure", True),
    ("start_answered_late", IMAGE, _late_start, "sandbox_unavailable", True),
]


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("image", "start", "code", "retryable"),
    [case[1:] for case in START_FAILURES],
    ids=[case[0] for case in START_FAILURES],
)
async def test_a_container_whose_start_fails_is_removed_before_the_error(
    host: docker.DockerClient,
    image: str,
    start: Callable[[Callable[..., Any], str], None],
    code: str,
    retryable: bool,
) -> None:
    require_docker(image)
    client, started = _client_starting(start)
    await _two_failed_runs_leave_nothing(host, client, image, code, retryable)
    assert len(started) == 2, "the engine created each container and was asked to start it"


async def _two_failed_runs_leave_nothing(
    host: docker.DockerClient, client: docker.DockerClient, image: str, code: str, retryable: bool
) -> None:
    """Two runs of a backend on ``client`` fail with ``code``, and leave no container: at
    once, with the backend still open (close()'s sweep must not be what removes them)."""
    backend = DockerBackend(image=image, profile=SandboxProfile(timeout_s=5), client=client)
    await backend.start()
    try:
        for _ in range(2):
            with pytest.raises(SandboxError) as raised:
                await backend.run("1")
            assert (raised.value.code, raised.value.retryable) == (code, retryable)
        assert _present(host, backend._owner) == set()
    finally:
        await backend.close()
        client.close()


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_container_whose_create_was_answered_late_is_removed_before_the_error(
    host: docker.DockerClient,
) -> None:
    # The engine makes the container, but answers after the client gave up: nobody learns
    # its id. It is found by its name and removed, with the backend still open.
    require_docker(IMAGE)
    client = docker.from_env(timeout=30)
    real, created = client.api.create_container, []

    def answered_late(*args: Any, **kwargs: Any) -> Any:
        created.append(real(*args, **kwargs)["Id"])
        raise requests.exceptions.ReadTimeout("Read timed out. (read timeout=30)")

    client.api.create_container = answered_late  # type: ignore[method-assign]
    await _two_failed_runs_leave_nothing(host, client, IMAGE, "sandbox_unavailable", True)
    assert len(created) == 2


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_warm_pool_retrying_failed_starts_leaves_none_behind(
    host: docker.DockerClient,
) -> None:
    client, started = _client_starting(_late_start)
    backend = DockerBackend(
        image=IMAGE, profile=SandboxProfile(timeout_s=5), client=client, pool_size=1
    )
    await backend.start()
    try:
        until = time.monotonic() + 10.0
        while len(started) < 4 and time.monotonic() < until:
            await asyncio.sleep(0.1)
        assert len(started) >= 4, "the pool retries its failed starts"
        # Each of the pool's parallel starts records its next container only once its last
        # failed start has ended: all but the latest of each are over, and must be gone.
        over = set(started[:-2])
        present = {cid for cid in _present(host, backend._owner) if cid in over}
        assert present == set(), "containers whose start failed stay while the backend is open"
    finally:
        await backend.close()
        client.close()


class _Container:
    """A kept container whose removal the engine never answers; its program, once ``cut``
    is set (by its removal, or by the test), fails as a runner killed under it does."""

    id = "stand-in"

    def __init__(self) -> None:
        self.alive = True
        self.programs = 0
        self.removals = 0
        self.cut = asyncio.Event()

    async def run(self, program: str, **_: Any) -> RunResult:
        self.programs += 1
        await self.cut.wait()
        raise SandboxFailure("the kept runner exited before it opened the program's connection")

    async def destroy(self) -> None:
        self.removals += 1
        self.cut.set()
        await asyncio.Event().wait()


@pytest.mark.anyio
async def test_a_kept_sandbox_closed_while_its_container_starts_does_not_wait_for_its_removal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kept_module, "_CLOSE_WAIT_S", 0.5)
    container, started = _Container(), asyncio.Event()
    kept = _kept(container, started=started)
    began = time.monotonic()
    run = asyncio.create_task(kept.run("'after close'"))
    ended: list[float] = []
    run.add_done_callback(lambda _: ended.append(time.monotonic() - began))
    await asyncio.sleep(0.05)  # its container starts now
    closing = asyncio.create_task(kept.close())
    await asyncio.sleep(0.05)
    started.set()
    await asyncio.wait([run], timeout=2.0)
    assert ended, "the run returned at once, not after the engine's removal (never answered)"
    assert ended[0] < 0.5
    with pytest.raises(SandboxClosed, match="closed while its container started"):
        await run
    await asyncio.wait_for(closing, 2.0)  # close() waited for that removal, within its bound
    assert (container.programs, container.removals) == (0, 1)


# (case, what closes, what the run raises, retryable, what its message names)
CUT_OFF = [
    ("kept_closed", "kept", "sandbox_closed", False, "kept sandbox was closed"),
    ("backend_closed", "backend", "sandbox_closed", False, "backend is closed"),
    ("nothing_closed", "nothing", "sandbox_failure", True, "runner"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("closing", "code", "retryable", "names"),
    [case[1:] for case in CUT_OFF],
    ids=[case[0] for case in CUT_OFF],
)
async def test_a_kept_run_cut_off_by_close_raises_sandbox_closed(
    monkeypatch: pytest.MonkeyPatch, closing: str, code: str, retryable: bool, names: str
) -> None:
    monkeypatch.setattr(kept_module, "_CLOSE_WAIT_S", 0.2)
    container, backend_closed = _Container(), [False]
    kept = _kept(container, backend_closed=lambda: backend_closed[0])
    run = asyncio.create_task(kept.run("'in flight'"))
    await asyncio.sleep(0.05)  # its program runs now
    if closing == "kept":
        await kept.close()  # removes the container under the program
    else:
        # The backend's close() closes its kept sandboxes in tasks of their own: the run may
        # hear of its runner's end first.
        backend_closed[0] = closing == "backend"
        container.cut.set()
    with pytest.raises(SandboxError) as raised:
        await asyncio.wait_for(run, 1.0)
    assert (raised.value.code, raised.value.retryable) == (code, retryable)
    assert names in str(raised.value)
    await kept.close()


def _close_as_inputs_are_checked(
    backend: DockerBackend, monkeypatch: pytest.MonkeyPatch
) -> list[asyncio.Task[None]]:
    """Have another task (a server shutting down) call ``backend.close()`` while the next run
    waits for its inputs' check in a thread, the check's answer already on its way: close()'s
    first step runs before the run resumes, the closing of its pool after. Returns that
    close(), once called."""
    closing: list[asyncio.Task[None]] = []
    to_thread = asyncio.to_thread

    async def checked_in_thread(call: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        if call is not resolve_inputs or closing:
            return await to_thread(call, *args, **kwargs)
        answer = call(*args, **kwargs)
        closing.append(asyncio.ensure_future(backend.close()))
        await asyncio.sleep(0)  # (the answer comes back in the loop's next turn)
        return answer

    monkeypatch.setattr(asyncio, "to_thread", checked_in_thread)
    return closing


async def _pooled_with_inputs(tmp_path: Path) -> tuple[DockerBackend, dict[str, str]]:
    """A started backend whose one warm container mounts its inputs, ready."""
    data = tmp_path / "a.txt"
    data.write_text("pooled input")
    inputs = {"a": str(data)}
    profile = SandboxProfile(timeout_s=5)
    backend = DockerBackend(image=IMAGE, profile=profile, pool_size=1, inputs=inputs)
    await backend.start()
    await backend.pool.wait_ready(1, timeout=30)
    assert backend.pool.ready == 1
    return backend, inputs


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """The ids of the containers programs ran in, and of those destroyed, in order."""
    ran: list[str] = []
    destroyed: list[str] = []
    run_in, destroy = SandboxContainer.run, SandboxContainer.destroy

    async def running(self: SandboxContainer, *args: Any, **kwargs: Any) -> RunResult:
        ran.append(self.id)
        return await run_in(self, *args, **kwargs)

    async def destroying(self: SandboxContainer) -> None:
        destroyed.append(self.id)
        await destroy(self)

    monkeypatch.setattr(SandboxContainer, "run", running)
    monkeypatch.setattr(SandboxContainer, "destroy", destroying)
    return ran, destroyed


_READS: Final = "print(open('/data/a').read())"


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("path", ["fresh", "kept"])
async def test_a_run_resuming_after_close_began_takes_no_warm_container(
    host: docker.DockerClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spied: tuple[list[str], list[str]],
    path: str,
) -> None:
    ran, _ = spied
    backend, inputs = await _pooled_with_inputs(tmp_path)
    try:
        kept = backend.keep(ALICE, inputs=inputs)  # (checks its inputs now, on the loop)
        closing = _close_as_inputs_are_checked(backend, monkeypatch)
        run = backend.run(_READS, inputs=inputs) if path == "fresh" else kept.run(_READS)
        with pytest.raises(SandboxClosed):
            await asyncio.wait_for(run, 10)
        assert ran == [], "no program ran on the closed backend"
        assert len(closing) == 1
        await asyncio.wait_for(closing[0], 15)
        assert _present(host, backend._owner) == set()
    finally:
        await backend.close()


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_container_taken_after_close_began_is_destroyed_when_its_run_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spied: tuple[list[str], list[str]]
) -> None:
    # A take close() never saw, whatever made it (the run's own refusal is out of the way
    # here): its run's end is the only one left to remove it and close its bridge.
    ran, destroyed = spied
    backend, inputs = await _pooled_with_inputs(tmp_path)
    try:
        closing = _close_as_inputs_are_checked(backend, monkeypatch)
        monkeypatch.setattr(backend, "_refuse_if_closed", lambda: None)
        with contextlib.suppress(SandboxClosed):  # (close()'s sweep may cut its program)
            await asyncio.wait_for(backend.run(_READS, inputs=inputs), 10)
        await asyncio.wait_for(closing[0], 15)
        assert len(ran) == 1, "the run took the warm container after close() began"
        for _ in range(20):  # (destroyed in the background)
            if ran[0] in destroyed:
                break
            await asyncio.sleep(0.05)
        assert ran[0] in destroyed
    finally:
        await backend.close()
