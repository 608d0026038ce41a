"""The Docker backend: every program in its own hardened container, warm ones pooled.

:meth:`DockerBackend.close` ends everything the backend started in a bounded time: programs
in flight (their containers are removed under them, and their runs return), kept sandboxes,
the pool and the starts it has in progress, then anything still labelled as this backend's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import Final, Self

import docker
import docker.errors

from airlock.bridge import ToolSession
from airlock.policies import Principal, SandboxProfile
from airlock.sandbox._container import SandboxContainer
from airlock.sandbox._errors import SandboxError, SandboxFailure, map_docker_errors
from airlock.sandbox._kept import KeptSandbox
from airlock.sandbox._owner import (
    LABEL,
    OWNER_LABEL,
    labelled_containers,
    owner_labels,
    reap_orphans,
    remove_container,
)
from airlock.sandbox._pool import WarmPool
from airlock.sandbox._result import ProgramError, RunResult

__all__ = ["DEFAULT_IMAGE", "MAX_PROGRAM_BYTES", "DockerBackend"]

DEFAULT_IMAGE: Final = "airlock-sandbox:latest"
MAX_PROGRAM_BYTES: Final = 1024 * 1024
_CLOSE_WAIT_S: Final = 5.0
"""How long :meth:`DockerBackend.close` waits for removals in progress before its last sweep."""
_log = logging.getLogger(__name__)


def _container_settings(profile: SandboxProfile) -> tuple[object, ...]:
    # What is fixed when a container starts; the rest travels with each run.
    return (
        profile.memory_bytes,
        profile.cpus,
        profile.pids_limit,
        profile.nofile_limit,
        profile.tmpfs_bytes,
        profile.user,
        profile.seccomp_allowed,
        profile.runtime,
    )


class DockerBackend:
    """Runs programs in containers of the sandbox image, one container per run.

    Use it as an async context manager (or call :meth:`start` and :meth:`close`): start-up
    checks the engine and the image, removes containers orphaned by a crashed process and
    fills the warm pool; closing removes every container this backend started.
    """

    def __init__(
        self,
        *,
        image: str = DEFAULT_IMAGE,
        profile: SandboxProfile | None = None,
        pool_size: int = 0,
        client: docker.DockerClient | None = None,
    ) -> None:
        self.image = image
        self.profile = profile or SandboxProfile()
        self._client = client
        self._owner_labels = owner_labels()
        self._owner = self._owner_labels[OWNER_LABEL]
        self._socket_root = Path(tempfile.mkdtemp(prefix="airlock-"))
        self._socket_root.chmod(0o755)
        self.pool = WarmPool(self._start_container, size=pool_size)
        self._cleanup: set[asyncio.Task[None]] = set()
        self._active: set[SandboxContainer] = set()
        """Containers running a program now (kept ones aside)."""
        self._started = False
        self._closed = False
        self._kept: weakref.WeakSet[KeptSandbox] = weakref.WeakSet()

    @property
    def can_keep(self) -> bool:
        """Always: :meth:`keep` keeps a container per conversation."""
        return True

    @property
    def client(self) -> docker.DockerClient:
        """The Docker client, created on first use.

        Raises:
            EngineUnavailable: the engine does not answer.
        """
        if self._client is None:
            with map_docker_errors():
                self._client = docker.from_env(timeout=30)
        return self._client

    async def start(self) -> None:
        """Check engine and image, reap orphans and start filling the pool.

        Raises:
            EngineUnavailable: the engine does not answer.
            ImageMissing: the sandbox image is not built.
        """
        client = self.client
        with map_docker_errors():
            await asyncio.to_thread(client.ping)
            await asyncio.to_thread(client.images.get, self.image)
        removed = await asyncio.to_thread(reap_orphans, client)
        if removed:
            _log.info("removed %d orphaned sandbox containers", len(removed))
        self._started = True
        self.pool.fill()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _start_container(self, profile: SandboxProfile | None = None) -> SandboxContainer:
        self._refuse_if_closed()
        container = await SandboxContainer.start(
            self.client,
            image=self.image,
            profile=profile or self.profile,
            labels={LABEL: "1", **self._owner_labels},
            socket_root=self._socket_root,
        )
        if self._closed:  # closed while it started: nobody will run or remove it
            await self._destroy(container)
            self._refuse_if_closed()
        return container

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise SandboxFailure("this sandbox backend is closed; start a new DockerBackend")

    async def run(
        self,
        program: str,
        *,
        profile: SandboxProfile | None = None,
        tools: ToolSession | None = None,
    ) -> RunResult:
        """Run ``program`` in a fresh container (a warm one when the pool has it).

        With ``tools``, the program's ``tools.NAME(...)`` calls are admitted through that
        session's registry as ``caller="code"``; without, it has no tools.

        Raises:
            SandboxError: the engine, the image or a container start failed, or the backend
                is closed.
        """
        self._refuse_if_closed()
        if not self._started:
            await self.start()
        profile = profile or self.profile
        began = time.perf_counter()
        size = len(program.encode("utf-8", errors="replace"))
        if size > MAX_PROGRAM_BYTES:
            return RunResult(
                status="invalid_program",
                exit_status=2,
                has_value=False,
                error=ProgramError(
                    type="InvalidProgram",
                    message=f"the program is {size} bytes; the limit is {MAX_PROGRAM_BYTES}",
                ),
                duration_s=time.perf_counter() - began,
            )
        container = None
        if _container_settings(profile) == _container_settings(self.profile):
            container = self.pool.take()
        pooled = container is not None
        if container is None:
            container = await self._start_container(profile)
        self._active.add(container)
        try:
            result = await container.run(program, profile=profile, pooled=pooled, tools=tools)
        finally:
            self._active.discard(container)
            if self._closed:
                await self._destroy(container)
            else:
                # Removal is off the result's path; close() waits for it.
                task = asyncio.create_task(self._destroy(container))
                self._cleanup.add(task)
                task.add_done_callback(self._cleanup.discard)
        return result.model_copy(update={"duration_s": time.perf_counter() - began})

    def keep(
        self,
        owner: Principal,
        *,
        idle_timeout: float = 300.0,
        profile: SandboxProfile | None = None,
    ) -> KeptSandbox:
        """A kept sandbox for one conversation of ``owner``: programs run one after another
        in one container and see the top-level names earlier ones left (see
        :class:`KeptSandbox`). :meth:`close` removes it with everything else.

        Raises:
            SandboxError: the backend is closed.
        """
        self._refuse_if_closed()
        kept = KeptSandbox(
            self._start_kept,
            owner=owner,
            profile=profile or self.profile,
            idle_timeout=idle_timeout,
            max_program_bytes=MAX_PROGRAM_BYTES,
            container_settings=_container_settings,
        )
        self._kept.add(kept)
        return kept

    async def _start_kept(self, profile: SandboxProfile) -> SandboxContainer:
        if not self._started:
            await self.start()
        container = None
        if _container_settings(profile) == _container_settings(self.profile):
            container = self.pool.take()  # a warm runner that never ran anything
        return container if container is not None else await self._start_container(profile)

    async def _destroy(self, container: SandboxContainer) -> None:
        try:
            await container.destroy()
        except SandboxError as exc:
            _log.warning("could not destroy sandbox container %s: %s", container.id, exc)

    async def close(self) -> None:
        """Destroy every container this backend started: programs in flight, whatever their
        bridge is doing (their runs then return), kept sandboxes, the pool and its starts in
        progress; later runs are refused. Two waits of at most :data:`_CLOSE_WAIT_S` each
        (kept sandboxes and the pool in parallel, then removals in progress) and a last
        sweep: about a second with a responsive engine, ten seconds and the sweep at worst."""
        self._closed = True
        work = [kept.close() for kept in list(self._kept)]
        work.append(self.pool.close())
        work.extend(self._destroy(container) for container in list(self._active))
        for outcome in await asyncio.gather(*work, return_exceptions=True):
            if isinstance(outcome, BaseException):
                _log.warning("closing the sandbox backend: %s", outcome)
        if self._cleanup:
            await asyncio.wait(list(self._cleanup), timeout=_CLOSE_WAIT_S)
        if self._client is not None:
            # Anything still labelled as ours (a start interrupted mid-way) goes too; only
            # ours, by this backend's own owner label.
            with contextlib.suppress(SandboxError):
                leftovers = await asyncio.to_thread(
                    labelled_containers, self._client, owner=self._owner
                )
                for entry in leftovers:
                    await asyncio.to_thread(remove_container, self._client, str(entry["Id"]))
        shutil.rmtree(self._socket_root, ignore_errors=True)
