"""One sandbox container, its runner connected over the bridge socket: what a run does with it.

A :class:`SandboxContainer` (built on what :func:`~airlock.sandbox._launch.launch` started)
serves exactly one program and is then destroyed, unless it is kept for one principal's
conversation. The program is delivered as a ``run`` frame over a Unix socket that lives in a
per-container host directory bind-mounted read-only at ``/run/airlock``; the result comes back
as a ``done`` frame, which :func:`~airlock.sandbox._outcome.judge_outcome` turns into the run's
result. Nothing is copied in or out of the container's file system: inputs are host files
bind-mounted read-only at ``/data/NAME`` when the container is created, and the files a program
leaves in ``/out`` (a size-capped tmpfs) come back as ``artifact`` frames
(:mod:`airlock.sandbox._artifacts`).

A kept container's runner is a zygote (``airlock_zygote`` in the guest) that runs no program
itself: for each program it ends every other process in the container and forks a process
for it, with a connection of its own on which it says ``hello`` with a one-time token the host
sent it (:class:`~airlock.sandbox._program_link.ProgramLinks`: accepted ahead, in the
background; a connection without the token is closed unread). The host writes the program's
``run`` frame on that connection, serves it there only and closes it after ``done``: nothing a
program leaves behind can send a frame in the next one's name.

The host stays in control whatever the guest does: no wait on the guest outlasts the run's
deadline (plus :data:`_GRACE_S` to judge the result), and :meth:`SandboxContainer.destroy`
drops what the guest has not read instead of waiting for it, then kills and removes the
container.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any, Final

import docker

from airlock.bridge import (
    ArtifactRefused,
    BridgeLimits,
    RunEnd,
    ToolSession,
    encode_frame,
    serve_run,
)
from airlock.bridge import airlock_wire as wire
from airlock.policies import SandboxProfile
from airlock.sandbox._artifacts import ArtifactReceiver, ArtifactRef
from airlock.sandbox._cgroup import RunMark, mark_run, read_evidence
from airlock.sandbox._errors import SandboxFailure
from airlock.sandbox._final_value import MAX_VALUE_BYTES, VALUE_ELEMENTS
from airlock.sandbox._inputs import RunInput
from airlock.sandbox._launch import Launched, remove
from airlock.sandbox._outcome import judge_outcome
from airlock.sandbox._program_link import ProgramLinks
from airlock.sandbox._result import RunResult

__all__ = ["MAX_VALUE_BYTES", "SandboxContainer"]

# A done frame holds two capped streams (JSON escaping can grow text up to 6x), an error
# with a traceback and a final value.
_RESULT_OVERHEAD_BYTES: Final = 256 * 1024
LEAST_LEFT_S: Final = 0.05
"""The least of its deadline a program is given, however long its run waited before it: a run
ends by its deadline plus this, at most (and the grace to wind down)."""
_GRACE_S: Final = 5.0
"""After a run's deadline: time for the bridge to wind down before the run is ended anyway."""
_GUEST_MARGIN_S: Final = _GRACE_S + 10.0
"""How long after a run's deadline the guest ends the program itself (the ``run`` frame's
``deadline_s``): a backstop for a host killed or stuck mid-run, well past the grace above and
the time to judge the result, so a run's outcome stays the host's."""
_PROGRAM_HELLO_S: Final = 10.0
"""How long a kept runner may take to open a program's connection (ending the previous
program's processes first)."""


class SandboxContainer:
    """A started container whose runner is connected, warm and waiting for one program."""

    def __init__(
        self,
        client: docker.DockerClient,
        launched: Launched,
        *,
        profile: SandboxProfile,
        inputs: tuple[RunInput, ...] = (),
    ) -> None:
        self._client = client
        self.container = launched.container
        self.profile = profile
        self.inputs = inputs
        """What is mounted at ``/data``: fixed when the container was created."""
        self._socket_dir = launched.socket_dir
        self._reader = launched.reader
        self._writer = launched.writer
        self._used = False
        self._kept = False
        self._destroying = False
        """Set as :meth:`destroy` begins: a bridge that ends then was ended by the host."""
        self._listener = launched.listener
        """Open for the connections a kept runner opens, one per program."""
        self._links = ProgramLinks(
            (launched.reader, launched.writer),
            launched.listener,
            runtime=launched.runtime,
            runner_pid=launched.runner_pid,
            container_id=str(launched.container.id),
            hello_s=_PROGRAM_HELLO_S,
            on_ready=self._mark_ready,
        )
        """A kept container's program connections (the next one's, accepted ahead)."""
        self._mark: RunMark | None = None
        """The cgroup counters as the kept program in flight began."""
        self._ready_mark: RunMark | None = None
        """The cgroup counters as the next program's process said hello: the runner had
        ended the previous program's processes, and the new one runs nothing until its run
        frame, so what changes after this is that program's."""

    def _mark_ready(self) -> None:
        # A kept container's counters add up over its programs: each is judged on what
        # changed since its process said hello (whatever the previous program left running
        # until then counts before the mark), marked between programs, not on a run's path.
        self._ready_mark = mark_run(self.id)

    @property
    def id(self) -> str:
        """The container's full id."""
        return str(self.container.id)

    @property
    def alive(self) -> bool:
        """Whether the runner is still connected (a pooled container can die while idle)."""
        return not self._reader.at_eof() and not self._writer.is_closing() and self._links.usable

    async def run(
        self,
        program: str,
        *,
        profile: SandboxProfile,
        pooled: bool,
        tools: ToolSession | None = None,
        keep: bool = False,
        clean: bool = False,
        artifacts: Path | None = None,
        began: float | None = None,
    ) -> RunResult:
        """Deliver ``program``, serve its tool calls, and report how it ended.

        ``began`` (a ``time.perf_counter()``) is when the run began, if before this call:
        what it waited since (for this container to start, or for the program before it)
        counts against the profile's deadline, of which the program gets what is left
        (:data:`LEAST_LEFT_S` at least).

        The caller destroys the container afterwards, whatever happened; unless ``keep``,
        which makes the runner wait for further programs of the same conversation (every
        run of a kept container must pass ``keep``); with ``clean`` too, each program starts
        with an empty ``/tmp`` and no names kept. With ``artifacts`` (a directory that
        does not exist yet), the files the program leaves in ``/out`` are stored there and
        listed in the result; a run that does not end ``ok`` or ``error`` after sending them
        all (however it ends: a limit, a runner that died mid-file, an exception,
        cancellation) leaves nothing there and no descriptor open. Returns by the profile's
        deadline plus :data:`_GRACE_S` and the time to judge the result, whatever the guest
        does; a bridge the guest ended early is judged by the deadline (a program that shut
        its end down and went on is a timeout then, or a protocol error before).

        Raises:
            SandboxFailure: :meth:`destroy` began before the program reported (a close
                removed the container under it): its end is the host's doing, not the
                program's nor its runner's.
        """
        if self._used and not (keep and self._kept):
            raise RuntimeError("a sandbox container runs one program only, unless kept")
        self._used = True
        self._kept = keep
        now = time.perf_counter()
        began = now if began is None else max(began, now - profile.timeout_s + LEAST_LEFT_S)
        # (max: began was clamped in perf_counter's large floats, which round a few ulps low)
        left_s = max(LEAST_LEFT_S, profile.timeout_s - (now - began))  # the program's time
        deadline = time.monotonic() + left_s
        receiver = (
            ArtifactReceiver(
                artifacts,
                max_files=profile.artifact_limit_files,
                max_bytes=profile.artifact_limit_bytes,
            )
            if artifacts is not None
            else None
        )
        limits = tools.limits if tools else BridgeLimits()
        frame = encode_frame(
            {
                "type": wire.RUN,
                "program": program,
                "mode": profile.language_mode,
                "allowed_imports": sorted(profile.allowed_imports),
                "output_limit": profile.output_limit_bytes,
                "value_limit": MAX_VALUE_BYTES,
                "value_elements": VALUE_ELEMENTS,
                "max_call_frame_bytes": limits.max_call_frame_bytes,
                "max_in_flight": limits.max_in_flight,
                "max_batch_items": limits.max_batch_items,
                "deadline_s": left_s + _GUEST_MARGIN_S,
                "tools": [stub.to_wire() for stub in tools.stubs()] if tools else [],
                "artifacts": {
                    "dir": wire.OUT_DIR,
                    "files": profile.artifact_limit_files,
                    "bytes": profile.artifact_limit_bytes,
                }
                if receiver is not None
                else None,
                **({"keep": "clean" if clean else True} if keep else {}),
            }
        )
        stored: tuple[ArtifactRef, ...] | None = None  # once the receiver finished
        kept = False  # once the files are the result's
        self._mark = None  # a kept program's is the mark of its process's hello (_serve_kept)
        try:
            outcome: dict[str, Any] | RunEnd | None
            try:
                if keep:
                    outcome = await self._links.serve(
                        frame,
                        lambda r, w: self._serve_kept(r, w, tools, deadline, profile, receiver),
                        deadline=deadline,
                        keep="clean" if clean else True,
                        mode=profile.language_mode,
                        tools=tools,
                    )
                else:
                    self._writer.write(frame)
                    outcome = await self._serve(
                        self._reader, self._writer, tools, deadline, profile, receiver
                    )
            except TimeoutError:  # the bridge did not wind down after the deadline (_serve)
                outcome = RunEnd("timeout", "timeout", "the run's deadline passed")
            except (ConnectionError, OSError):
                outcome = None
            if self._destroying and not isinstance(outcome, dict):
                # The host ended the bridge itself, removing the container under the program
                # (only a close does, mid-run): no verdict on the program or its runner is
                # true, and the caller's close() turns this into SandboxClosed.
                raise SandboxFailure(
                    f"sandbox container {self.id[:12]} was removed while its program ran"
                )
            if receiver is not None and isinstance(outcome, dict):
                try:
                    # (on a worker thread only when it has files to close: a thread's round
                    # trip cost a warm run 300 us or more)
                    stored = (
                        receiver.finish()
                        if receiver.nothing_open
                        else await asyncio.to_thread(receiver.finish)
                    )
                except ArtifactRefused as exc:
                    outcome = RunEnd("protocol_error", None, exc.message)
            update: dict[str, Any] = {"tool_calls": tools.calls if tools else 0}
            result = await judge_outcome(
                outcome,
                container=self.container,
                began=began,
                profile=profile,
                pooled=pooled,
                since=self._mark,
                kept_runner_alive=keep and self.alive,
                host_ended=self._destroying,
            )
            if stored is not None and result.status in ("ok", "error"):
                update["artifacts"] = stored
                kept = True
        finally:
            if receiver is not None and not kept:
                # Every other way out (the runner died mid-file, a limit, a protocol error,
                # an exception, cancellation): what arrived is no run's, and a file begun
                # and never ended still holds a host descriptor.
                await receiver.discard_whatever_happens()
        # model_copy does not validate: the value is the decoder's JSON as it is.
        return result.model_copy(update=update)

    async def _serve_kept(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        tools: ToolSession | None,
        deadline: float,
        profile: SandboxProfile,
        artifacts: ArtifactReceiver | None,
    ) -> dict[str, Any] | RunEnd | None:
        self._mark, self._ready_mark = self._ready_mark, None
        return await self._serve(reader, writer, tools, deadline, profile, artifacts)

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        tools: ToolSession | None,
        deadline: float,
        profile: SandboxProfile,
        artifacts: ArtifactReceiver | None,
    ) -> dict[str, Any] | RunEnd | None:
        """Serve the program sent on ``writer`` until it reports, by ``deadline`` plus
        :data:`_GRACE_S` at the latest (then ``TimeoutError``). The bound is set here, once
        the ``run`` frame has left, not before: arming a timer cost a warm run about 50 us,
        and the waits before (a kept program's connection) have deadlines of their own."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout_at(loop.time() + (deadline + _GRACE_S - time.monotonic())):
            if writer.transport.get_write_buffer_size():
                try:
                    # A runner that does not read its program cannot hold the host past the
                    # deadline.
                    async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
                        await writer.drain()
                except TimeoutError:
                    end = RunEnd(
                        "timeout", "timeout", "the runner did not take its program in time"
                    )
                    if tools is not None:
                        tools.record_end(end)
                    return end
            return await serve_run(
                reader,
                writer,
                session=tools,
                deadline=deadline,
                max_done_bytes=2 * 6 * profile.output_limit_bytes
                + MAX_VALUE_BYTES
                + _RESULT_OVERHEAD_BYTES,
                artifacts=artifacts,
            )

    def memory_bytes(self) -> int | None:
        """Memory currently charged to the container, from its cgroup."""
        evidence = read_evidence(self.id)
        return evidence.memory_bytes if evidence else None

    async def destroy(self) -> None:
        """Kill and remove the container and its socket directory, whatever state the bridge
        is in: what the guest has not read yet is dropped, never waited for. Safe to call
        twice, and concurrently.

        Raises:
            SandboxError: the engine did not remove the container.
        """
        self._destroying = True
        self._writer.transport.abort()
        self._links.close()  # a kept program in flight returns now
        self._listener.close()
        try:
            await remove(self._client, self.id)
        finally:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
