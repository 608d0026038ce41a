"""The Docker backend: every program in its own hardened container, warm ones pooled.

:meth:`DockerBackend.close` ends everything the backend started in a bounded time: programs
in flight (their containers are removed under them, and their runs return), kept sandboxes,
the pool and the starts it has in progress, then anything still labelled as this backend's.

Two images: the base one (``airlock-sandbox``, the standard library) and the data one
(``airlock-sandbox-data``: numpy, pandas, pyarrow, matplotlib), chosen by the profile's
``image``. Inputs are mounted when a container is created, so a pooled container, started
before any run, carries the backend's own ``inputs`` (``airlock serve --inputs DIR``): a run
takes one only when it asks for exactly those, still the files at those paths (one replaced
on the host since is not what the container mounted: :mod:`airlock.sandbox._pool_fit`), and
any other run with inputs starts its own container (a cold start; the benchmark measures
it). A run without inputs never gets a container that has some.

With ``reuse=True`` a principal's runs share one container, never another principal's, each
in a fresh process with an empty ``/tmp`` (:mod:`airlock.sandbox._reuse`); it goes after
``reuse_idle_s`` without a run, after a limit hit, or, least recently used first, when more
than ``reuse_max`` are held once their runs end (a burst of principals may hold more).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import time
import weakref
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Final, Self

import docker
import docker.errors

from airlock.bridge import ToolSession
from airlock.policies import Principal, SandboxProfile
from airlock.sandbox._closing import Starts, cut_off_by_close, destroy, settle, sweep
from airlock.sandbox._container import SandboxContainer
from airlock.sandbox._engine_thread import on_engine_thread
from airlock.sandbox._errors import (
    ImageMissing,
    SandboxClosed,
    SandboxFailure,
    map_docker_errors,
)
from airlock.sandbox._hardening import container_settings
from airlock.sandbox._inputs import RunInput, resolve_inputs
from airlock.sandbox._kept import KeptSandbox
from airlock.sandbox._launch import launch
from airlock.sandbox._owner import LABEL, OWNER_LABEL, owner_labels, reap_orphans, retire
from airlock.sandbox._pool import WarmPool
from airlock.sandbox._pool_fit import PoolFit
from airlock.sandbox._program_size import refuse_oversized
from airlock.sandbox._result import RunResult
from airlock.sandbox._reuse import PrincipalContainers
from airlock.sandbox._socket_root import make_socket_root, reap_socket_roots
from airlock.sandbox._start_wait import StartWaits

__all__ = ["DEFAULT_DATA_IMAGE", "DEFAULT_IMAGE", "MAX_PROGRAM_BYTES", "DockerBackend", "Inputs"]

DEFAULT_IMAGE: Final = "airlock-sandbox:latest"
DEFAULT_DATA_IMAGE: Final = "airlock-sandbox-data:latest"
MAX_PROGRAM_BYTES: Final = 1024 * 1024
Inputs = Mapping[str, str | os.PathLike[str]]
"""A run's inputs: name (``/data/NAME``) -> host file or directory."""
_CLOSE_WAIT_S: Final = 5.0
"""How long :meth:`DockerBackend.close` waits for what it ends, and then for its last sweep."""
_log = logging.getLogger(__name__)


class DockerBackend:
    """Runs programs in containers of the sandbox image, one container per run.

    Use it as an async context manager (or call :meth:`start` and :meth:`close`): start-up
    checks the engine and the image, removes containers orphaned by a crashed process and
    fills the warm pool; closing removes every container this backend started.

    ``image`` and ``data_image`` are the images of the profile's ``image = "base"`` and
    ``"data"``. ``inputs`` are mounted in every pooled container (see the module's
    docstring); a run still names the inputs it wants.

    Raises:
        InputRefused: ``inputs`` holds an input that cannot be mounted (checked at once).
    """

    def __init__(
        self,
        *,
        image: str = DEFAULT_IMAGE,
        data_image: str = DEFAULT_DATA_IMAGE,
        profile: SandboxProfile | None = None,
        pool_size: int = 0,
        client: docker.DockerClient | None = None,
        inputs: Inputs | None = None,
        reuse: bool = False,
        reuse_idle_s: float = 30.0,
        reuse_max: int = 32,
    ) -> None:
        self.image = image
        self.data_image = data_image
        self.profile = profile or SandboxProfile()
        self._pool_inputs_given = dict(inputs or {})
        pool_inputs = resolve_inputs(
            self._pool_inputs_given, limit_bytes=self.profile.input_limit_bytes
        )
        self._client = client
        self._owner_labels = owner_labels()
        self._owner = self._owner_labels[OWNER_LABEL]
        self._socket_root: Path | None = None  # (made by the first start)
        self.pool = WarmPool(self._start_container, size=pool_size)
        self._fit = PoolFit(
            self.pool, profile=self.profile, inputs=pool_inputs, discard=self._destroy_later
        )
        self._cleanup: set[asyncio.Task[bool]] = set()
        self._active: set[SandboxContainer] = set()  # running a program now (not kept ones)
        self._starts = Starts()
        self._start_waits = StartWaits(discard=self._destroy_later)
        self._started = False
        self._closed = False
        self._kept: weakref.WeakSet[KeptSandbox] = weakref.WeakSet()
        self._images_found: set[str] = set()
        self.reuse = reuse
        self._reused = PrincipalContainers(
            lambda owner: self.keep(owner, idle_timeout=reuse_idle_s, clean=True),
            limit=reuse_max,
        )

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
        with map_docker_errors():
            await on_engine_thread(self.client.ping)
        await self._check_image(self.profile)
        removed = await on_engine_thread(reap_orphans, self.client)
        if removed:
            _log.info("removed %d orphaned sandbox containers", len(removed))
        await asyncio.to_thread(reap_socket_roots)
        self._started = True
        self.pool.fill()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def image_for(self, profile: SandboxProfile) -> str:
        """The image a container of ``profile`` runs."""
        return self.data_image if profile.image == "data" else self.image

    async def _check_image(self, profile: SandboxProfile) -> None:
        image = self.image_for(profile)
        if image in self._images_found:
            return
        try:
            with map_docker_errors():
                await on_engine_thread(self.client.images.get, image)
        except ImageMissing:
            build = "make image-data" if profile.image == "data" else "make image"
            raise ImageMissing(image, build=build) from None
        self._images_found.add(image)

    async def _start_container(
        self, profile: SandboxProfile | None = None, inputs: tuple[RunInput, ...] | None = None,
        *, warm: bool = False,
    ) -> SandboxContainer:  # fmt: skip
        """A started container: for the pool (no profile, no inputs; ``warm``: warmed up
        before it is ready), or for a run waiting for it."""
        self._refuse_if_closed()
        pooled = inputs is None
        if inputs is None:  # the backend's own inputs, checked again
            given, limit = self._pool_inputs_given, self.profile.input_limit_bytes
            inputs = await asyncio.to_thread(resolve_inputs, given, limit_bytes=limit)
        chosen = profile or self.profile
        await self._check_image(chosen)
        self._refuse_if_closed()  # closed while it waited: the socket root may be gone
        started = functools.partial(SandboxContainer, self.client, profile=chosen, inputs=inputs)
        launched = await self._starts.run(
            launch(
                self.client,
                image=self.image_for(chosen),
                profile=chosen,
                labels={LABEL: "1", **self._owner_labels},
                socket_root=self._sockets(),
                inputs=inputs,
                warm_up=("first" if warm else "when_idle") if pooled else "never",
            ),
            discard=lambda launched: self._destroy_later(started(launched)),
        )
        container = started(launched)
        if self._closed:  # closed while it started: nobody will run or remove it
            self._destroy_later(container)  # the run's answer does not wait for the engine
            self._refuse_if_closed()
        return container

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise SandboxClosed()

    async def run(
        self,
        program: str,
        *,
        profile: SandboxProfile | None = None,
        tools: ToolSession | None = None,
        inputs: Inputs | None = None,
        artifacts: Path | None = None,
    ) -> RunResult:
        """Run ``program`` in a fresh container (a warm one when the pool has it).

        With ``tools``, the program's ``tools.NAME(...)`` calls are admitted through that
        session's registry as ``caller="code"``; without, it has no tools. ``inputs`` are
        mounted read-only at ``/data/NAME`` (checked first: nothing starts when one is
        refused); whoever calls decides that the run may read them (a session checks its
        grant). With ``artifacts`` (a directory that does not exist yet) the files the
        program leaves in ``/out`` are stored there and listed in the result.

        Raises:
            InputRefused: an input cannot be mounted, or the inputs are over the profile's
                ``input_limit_bytes``.
            SandboxError: the engine, the image or a container start failed, or the backend
                is closed (:class:`SandboxClosed`, not retryable, also for a run that
                :meth:`close` cut off without a result).
        """
        self._refuse_if_closed()
        if not self._started:
            await self.start()
        profile = profile or self.profile
        mounts = (
            await asyncio.to_thread(resolve_inputs, inputs, limit_bytes=profile.input_limit_bytes)
            if inputs
            else ()
        )
        began = time.perf_counter()
        refused = refuse_oversized(program, limit=MAX_PROGRAM_BYTES)
        if refused is not None:
            return refused.model_copy(update={"duration_s": time.perf_counter() - began})
        with cut_off_by_close(lambda: self._closed):
            if self.reuse and tools is not None and not mounts and self._fit.fits(profile, mounts):
                result = await self._reused.run(
                    program,
                    profile=profile,
                    tools=tools,
                    artifacts=artifacts,
                    fresh=lambda: self._run_fresh(program, profile, tools, mounts, artifacts),
                )
            else:
                result = await self._run_fresh(program, profile, tools, mounts, artifacts)
        return result.model_copy(update={"duration_s": time.perf_counter() - began})

    async def _run_fresh(
        self, program: str, profile: SandboxProfile, tools: ToolSession | None,
        mounts: tuple[RunInput, ...], artifacts: Path | None,
    ) -> RunResult:  # fmt: skip
        began = time.perf_counter()  # (a start counts against the run's deadline)
        self._refuse_if_closed()  # (closed while its inputs resolved: close() saw no take)
        container = self._fit.take(profile, mounts)
        pooled = container is not None
        if container is None:
            container = await self._start_for_run(profile, mounts)
        seen = not self._closed  # by close(), which removes what is active as it begins
        self._active.add(container)
        try:
            result = await container.run(
                program, profile=profile, pooled=pooled, tools=tools, artifacts=artifacts,
                began=began,
            )  # fmt: skip
        finally:
            self._active.discard(container)
            if not (self._closed and seen):  # else close() removes it
                self._destroy_later(container)
        return result

    async def _start_for_run(
        self, profile: SandboxProfile, mounts: tuple[RunInput, ...]
    ) -> SandboxContainer:
        """A container for a run, waited for by its deadline (:class:`StartWaits`)."""
        start = self._start_container(profile, mounts)
        return await self._start_waits.wait(start, timeout_s=profile.timeout_s)

    def _destroy_later(self, container: SandboxContainer) -> None:
        """Off the result's path; :meth:`close` waits for it."""
        task = asyncio.create_task(destroy(container))
        self._cleanup.add(task)
        task.add_done_callback(self._cleanup.discard)

    def keep(
        self,
        owner: Principal,
        *,
        idle_timeout: float = 300.0,
        profile: SandboxProfile | None = None,
        inputs: Inputs | None = None,
        clean: bool = False,
    ) -> KeptSandbox:
        """A kept sandbox for one conversation of ``owner``: programs run one after another
        in one container and see the top-level names earlier ones left (see
        :class:`KeptSandbox`); ``inputs`` are mounted in it for the whole conversation.
        With ``clean``, nothing is kept: each program starts with an empty ``/tmp``.
        :meth:`close` removes it with everything else.

        Raises:
            InputRefused: an input cannot be mounted (checked at once).
            SandboxClosed: the backend is closed.
        """
        self._refuse_if_closed()
        chosen = profile or self.profile
        given = dict(inputs or {})
        resolve_inputs(given, limit_bytes=chosen.input_limit_bytes)

        async def start(kept_profile: SandboxProfile) -> SandboxContainer:
            return await self._start_kept(kept_profile, given)

        kept = KeptSandbox(
            start,
            owner=owner,
            profile=chosen,
            idle_timeout=idle_timeout,
            max_program_bytes=MAX_PROGRAM_BYTES,
            container_settings=container_settings,
            inputs=tuple(sorted(given)),
            clean=clean,
            backend_closed=lambda: self._closed,
        )
        self._kept.add(kept)
        return kept

    async def _start_kept(self, profile: SandboxProfile, inputs: Inputs) -> SandboxContainer:
        if not self._started:
            await self.start()
        limit = profile.input_limit_bytes
        mounts = await asyncio.to_thread(resolve_inputs, inputs, limit_bytes=limit)
        self._refuse_if_closed()  # (closed meanwhile: close() would not see what it takes)
        # A warm runner that never ran anything, else one started for this conversation.
        return self._fit.take(profile, mounts) or await self._start_for_run(profile, mounts)

    def _sockets(self) -> Path:
        """The directory of this backend's containers' socket directories.

        Raises:
            SandboxFailure: it could not be made.
        """
        if self._socket_root is None:
            try:
                self._socket_root = make_socket_root(self._owner_labels)
            except OSError as exc:
                raise SandboxFailure(f"no directory for the sandbox sockets: {exc!r}") from exc
        return self._socket_root

    async def close(self) -> None:
        """Destroy every container this backend started: programs in flight, whatever their
        bridge is doing (their runs return), runs still waiting for a container (they raise
        :class:`SandboxClosed` at once), kept sandboxes, the pool and its starts in progress;
        later runs are refused. Returns within about two waits of :data:`_CLOSE_WAIT_S` (ten
        seconds) even when the engine stalls: one for all of that, one for a last sweep of
        what is still labelled as this backend's; about a second with a responsive engine. A
        removal unanswered then goes on in the background; the next backend to start (in
        this process too) removes what the engine left."""
        self._closed = True
        self._start_waits.close()
        retire(self._owner)
        work: list[Awaitable[object]] = [kept.close() for kept in list(self._kept)]
        work += [self._reused.close(), self.pool.close(), *self._starts.cancel(), *self._cleanup]
        work.extend(destroy(container) for container in list(self._active))
        await settle(work, timeout=_CLOSE_WAIT_S, what="closing the sandbox backend")
        if self._client is not None:
            # Anything still labelled as ours (a start interrupted mid-way); only ours, by
            # this backend's own owner label.
            await sweep(self._client, self._owner, timeout=_CLOSE_WAIT_S)
        if self._socket_root is not None:
            shutil.rmtree(self._socket_root, ignore_errors=True)
