"""Taking the bridge connections of a container: its runner's, and a kept runner's one per
program, told apart from any other.

A kept container's runner (the guest's zygote) opens a new connection to the host's socket for
every program and says ``hello`` on it with the one-time ``token`` the host sent it for that
program. The socket file is connectable from anywhere in the container (and, on the host, by
anyone who can reach the directory), so :func:`accept_program` takes a connection only from
the runner's own peer (see :func:`~airlock.sandbox._runtime.is_runner_peer`) that says the
token; it closes any other unread. It runs in the background while the container waits for
its next program, and whatever it waits on is bounded by its ``deadline``; a run waiting for
that connection (:meth:`ProgramLinks.take`) stops waiting as soon as the runner ends its own
connection (it exited: it could not clear the container, or it was killed).
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from docker.models.containers import Container

from airlock.bridge import FrameError, RunEnd, ToolSession, encode_frame, read_frame
from airlock.bridge import airlock_wire as wire
from airlock.sandbox._engine_thread import on_engine_thread
from airlock.sandbox._errors import RunnerExited, SandboxFailure, map_docker_errors
from airlock.sandbox._runner_end import hung_up, last_word, watch_end
from airlock.sandbox._runtime import is_runner_peer

__all__ = [
    "HELLO_MAX_BYTES",
    "Link",
    "ProgramLinks",
    "accept_program",
    "accept_runner",
    "peer_pid",
]

HELLO_MAX_BYTES: Final = 4096
"""The largest ``hello`` frame the host reads."""
_STRAY_CONNECTIONS: Final = 8
"""Connections without the program's token a kept container may open before a run fails."""


def peer_pid(sock: socket.socket) -> int:
    """The pid of the process that connected ``sock`` (as the host sees it)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _uid, _gid = struct.unpack("3i", creds)
    return int(pid)


async def accept_runner(
    listener: socket.socket, container: Container, *, timeout: float
) -> tuple[socket.socket, int, str]:
    """The first connection to ``listener``: the container's runner, with its pid (as the
    host sees it) and the container's runtime.

    Whatever fails (or cancels it) once a connection came closes that connection.

    Raises:
        SandboxFailure: another process connected.
        SandboxError: the engine did not say which process the runner is.
        TimeoutError: nothing connected within ``timeout`` seconds.
    """
    loop = asyncio.get_running_loop()
    connection, _ = await asyncio.wait_for(loop.sock_accept(listener), timeout)
    try:
        # The socket file is world-connectable on the host: only the container's own first
        # process (the runner) may be the peer.
        with map_docker_errors():
            await on_engine_thread(container.reload)
        runner_pid = int(container.attrs["State"]["Pid"])
        runtime = str(container.attrs["HostConfig"].get("Runtime") or "runc")
        if not is_runner_peer(
            peer_pid(connection),
            runtime=runtime,
            container_pid=runner_pid,
            container_id=str(container.id),
        ):
            raise SandboxFailure("a process other than the container's runner connected")
    except BaseException:  # (the engine failed, or the start was cancelled): nobody's
        connection.close()
        raise
    return connection, runner_pid, runtime


async def accept_program(
    listener: socket.socket,
    *,
    token: str,
    deadline: float,
    runtime: str,
    runner_pid: int,
    container_id: str,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """The connection the kept runner opened for the program of ``token``, by ``deadline``
    (monotonic); ``None`` when none came, or after :data:`_STRAY_CONNECTIONS` others."""
    loop = asyncio.get_running_loop()
    for _ in range(_STRAY_CONNECTIONS):
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            connection, _ = await asyncio.wait_for(loop.sock_accept(listener), left)
        except TimeoutError:
            return None
        if not is_runner_peer(
            peer_pid(connection),
            runtime=runtime,
            container_pid=runner_pid,
            container_id=container_id,
        ):
            connection.close()
            continue
        reader, writer = await asyncio.open_unix_connection(sock=connection)
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
                hello = await read_frame(reader, max_bytes=HELLO_MAX_BYTES)
        except (TimeoutError, FrameError, OSError):
            writer.transport.abort()
            continue
        except BaseException:  # cancelled: the connection is nobody's
            writer.transport.abort()
            raise
        given = hello.get("token") if hello else None
        if (
            hello is not None
            and hello.get("type") == wire.HELLO
            and isinstance(given, str)
            and hmac.compare_digest(given.encode(), token.encode())
        ):
            return reader, writer
        writer.transport.abort()
    return None


Link = tuple[asyncio.StreamReader, asyncio.StreamWriter]
"""A program's own connection, accepted and checked."""
_Outcome = dict[str, Any] | RunEnd | None


class ProgramLinks:
    """A kept container's program connections: the next program's, accepted ahead, and the
    one of the program in flight.

    :meth:`prepare` sends the runner (on its ``control`` connection) the next program's
    one-time token, with what the host expects of that program (``keep``, and the language
    ``mode``, which its process warms up), and accepts in the background the connection that
    process opens with the token. When the token comes (sent once the previous result has
    been handed on), the runner ends what the previous program left (its process, having
    reported, stopped itself to wait for that, or for 10 ms at most; one that exited without
    reporting was cleared after at once), forks the next process and says ``hello`` for it,
    so a run (:meth:`take`) finds it connected, checked and warm. It watches ``control`` (its
    reader and writer) for the runner's end, and reads it only then, for the runner's last
    word (``airlock_wire.EXIT``: why it gave up). ``on_ready`` is called as each program's
    connection comes, before its run takes it (between programs, off the run's path).
    """

    def __init__(
        self,
        control: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        listener: socket.socket,
        *,
        runtime: str,
        runner_pid: int,
        container_id: str,
        hello_s: float,
        on_ready: Callable[[], object] | None = None,
    ) -> None:
        self._control_reader, self._control = control
        self._on_ready = on_ready
        self._listener = listener
        self._runtime = runtime
        self._runner_pid = runner_pid
        self._container_id = container_id
        self._hello_s = hello_s
        self._next: asyncio.Task[Link | None] | None = None
        self._serving: asyncio.StreamWriter | None = None
        self._soon: asyncio.Handle | None = None
        """The :meth:`prepare` due once the last result has gone on its way."""
        self._ended = asyncio.Event()
        """Set once the runner ended the control connection (it exited)."""
        watch_end(self._control, self._ended)

    @property
    def usable(self) -> bool:
        """Whether the next program's connection, accepted or still coming, can serve."""
        if self._ended.is_set():
            return False
        ahead = self._next
        if ahead is None or not ahead.done():
            return True
        if ahead.cancelled() or ahead.exception() is not None:
            return False
        link = ahead.result()
        return link is not None and not link[0].at_eof() and not link[1].is_closing()

    def prepare(self, *, keep: bool | str, mode: str) -> None:
        """Have the runner make the next program's process ready, and accept its connection
        in the background (unless that is under way already)."""
        if self._next is not None or self._control.is_closing():
            return
        token = secrets.token_urlsafe(24)
        frame = {"type": wire.RUN, "keep": keep, "mode": mode, "token": token}
        self._control.write(encode_frame(frame))
        self._next = asyncio.ensure_future(self._accept(token))
        self._next.add_done_callback(_retrieved)  # a failure is a container not alive

    async def _accept(self, token: str) -> Link | None:
        link = await accept_program(
            self._listener,
            token=token,
            deadline=time.monotonic() + self._hello_s,
            runtime=self._runtime,
            runner_pid=self._runner_pid,
            container_id=self._container_id,
        )
        if link is not None and self._on_ready is not None:
            self._on_ready()
        return link

    async def take(self, deadline: float) -> Link | None:
        """The next program's connection, waited for until ``deadline`` (monotonic) at most;
        ``None`` when none was prepared, it failed, or it did not come in time. It is the
        program in flight until :meth:`release`.

        Raises:
            RunnerExited: the runner ended its control connection before the connection
                came (it exited: the container is of no further use).
        """
        ahead, self._next = self._next, None
        if ahead is None:
            return None
        if not ahead.done():
            loop = asyncio.get_running_loop()
            ended = asyncio.ensure_future(self._ended.wait())
            try:
                async with asyncio.timeout_at(loop.time() + (deadline - time.monotonic())):
                    await asyncio.wait([ahead, ended], return_when=asyncio.FIRST_COMPLETED)
            except TimeoutError:
                _discard(ahead)
                return None
            except BaseException:
                _discard(ahead)
                raise
            finally:
                ended.cancel()
            if not ahead.done():
                # An exited runner opens no connection: waiting on would only use up the
                # run's deadline.
                _discard(ahead)
                raise await self._runner_exited()
        if ahead.cancelled() or ahead.exception() is not None:
            return None
        if hung_up(self._control):
            # The runner ended after the connection came (the container was killed between
            # programs) and the loop has not heard of it yet: the program must not be sent
            # into it, to be told its runner died.
            _discard(ahead)
            raise await self._runner_exited()
        link = ahead.result()
        if link is not None:
            self._serving = link[1]
        return link

    async def _runner_exited(self) -> RunnerExited:
        said = await last_word(self._control_reader)
        why = (
            f"it said: {said}"
            if said
            else "it could not end the previous program's processes, or it was killed"
        )
        return RunnerExited(
            f"the kept runner of container {self._container_id[:12]!r} exited before it "
            f"opened the program's connection, or as it did ({why}); the next run starts a "
            "new container"
        )

    async def serve(
        self,
        frame: bytes,
        serve: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[_Outcome]],
        *,
        deadline: float,
        keep: bool | str,
        mode: str,
        tools: ToolSession | None,
    ) -> _Outcome:
        """Send one program's ``run`` frame on its own connection (the next program's, taken
        by the run's ``deadline`` and within the runner's hello time), serve it there with
        ``serve(reader, writer)``, then end that connection, and :meth:`prepare` the next
        program's in the loop's next turn (unless a run comes first and does).

        Raises:
            RunnerExited: the runner exited before the program's connection came.
        """
        self._cancel_soon()  # this run prepares its process itself, now
        self.prepare(keep=keep, mode=mode)  # the container's first program
        link = await self.take(min(deadline, time.monotonic() + self._hello_s))
        if link is None:
            # A deadline shorter than the runner's time to ready a process (or used up
            # waiting for the previous program) is the program's timeout, not the runner's
            # fault.
            end = (
                RunEnd("timeout", "timeout", "the run's deadline passed before it started")
                if time.monotonic() >= deadline
                else RunEnd(
                    "protocol_error", None, "the kept runner did not open the program's connection"
                )
            )
            if tools is not None:
                tools.record_end(end)
            return end
        try:
            link[1].write(frame)
            return await serve(*link)
        finally:
            self.release()
            # The runner clears the container (whatever of this program still runs goes)
            # and connects the next program's process once the token comes: after this
            # result has gone on its way (the caller's turn of the loop), so that clearing
            # and forking do not compete with it for a processor. A run that comes first
            # prepares it itself.
            self._soon = asyncio.get_running_loop().call_soon(self._prepare_soon, keep, mode)

    def _prepare_soon(self, keep: bool | str, mode: str) -> None:
        self._soon = None
        self.prepare(keep=keep, mode=mode)

    def _cancel_soon(self) -> None:
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None

    def release(self) -> None:
        """End the connection of the program in flight: nothing it left can send on it."""
        serving, self._serving = self._serving, None
        if serving is not None:
            serving.transport.abort()

    def close(self) -> None:
        """End every program connection, in flight (its run returns now) or ahead."""
        self.release()
        self._cancel_soon()
        _discard(self._next)
        self._next = None


def _retrieved(ahead: asyncio.Task[Link | None]) -> None:
    if not ahead.cancelled():
        ahead.exception()


def _discard(ahead: asyncio.Task[Link | None] | None) -> None:
    """Cancel ``ahead``, or close the connection it accepted."""
    if ahead is None:
        return
    if not ahead.done():
        ahead.cancel()
    elif not ahead.cancelled() and ahead.exception() is None:
        link = ahead.result()
        if link is not None:
            link[1].transport.abort()
