"""A kept container's first process: it never runs a program, it forks one process per program.

Standard library only. A container that serves more than one program (a kept session's
conversation) must not let one program reach the next: a thread it left could forge the next
answer, a child could make calls in the next program's name, a patched module could change
how the next result is sent. So the runner, once warm, becomes a *zygote*:

1. it holds the control connection to the host (the one it said ``hello`` on) and reads
   ``run`` frames from it; no program's process ever holds that connection;
2. as soon as a program's process exits, it ends every other process in the container
   (``kill(-1, SIGKILL)`` from the container's init, then reaping) and checks the container's
   pid list (``/proc``) until it holds no process but its own; it empties ``/out`` (and, for
   a clean container, ``/tmp``);
3. then it forks the next program's process ahead of its ``run`` frame, with a new bridge
   connection open, waiting on a pipe; when the frame comes, and the pid list holds nothing
   but that process, it says ``hello`` on the connection with the frame's one-time
   ``token`` (which only this process has read, so the host can tell the program's
   connection from any other) and hands the frame over the pipe;
4. the program's process has closed the control connection; it loads its language mode's
   seccomp layer and runs the program over its own connection, which the host closes after
   ``done``.

The zygote is the container's init (pid 1): no program can signal it away, and every orphan
becomes its child, to be reaped. It is not dumpable, so no other process of the same user
can read or write its memory. It exits when the host closes the control connection.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airlock.bridge import airlock_wire as wire
    from airlock.sandbox.guest.airlock_bridge import Connection
else:
    import airlock_wire as wire
    from airlock_bridge import Connection

_CLEAR_TIMEOUT_S = 3.0
"""How long the zygote tries to end a program's leftovers before it gives up (and exits, so
that the host drops the container)."""
_PR_SET_DUMPABLE = 4


def other_processes(me: int) -> list[int]:
    """Pids in the container's pid list other than ``me`` (and the init, when that is not
    ``me``)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            pid = int(entry)
            if pid != me and pid != 1:
                pids.append(pid)
    return pids


def own_threads(me: int) -> int:
    """Threads of process ``me``."""
    try:
        return len(os.listdir(f"/proc/{me}/task"))
    except OSError:
        return 1


def clear_processes(timeout: float = _CLEAR_TIMEOUT_S) -> bool:
    """End every process in the container but this one and wait until the pid list shows
    none (zombies reaped); whether that happened within ``timeout`` seconds."""
    me = os.getpid()
    end = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)  # every process this user may signal, but init and me
        _reap()
        if not other_processes(me) and own_threads(me) == 1:
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.0005)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _not_dumpable() -> None:
    # Where libc or the profile refuses, the zygote still never runs a program.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


class _Spare:
    """A program's process forked ahead, with its bridge connection open, waiting on a pipe
    for its ``run`` frame: a run then pays neither the fork nor the connection."""

    def __init__(self, pid: int, connection: Connection, pipe: int) -> None:
        self.pid = pid
        self.connection = connection
        self.pipe = pipe

    def start(self, request: dict[str, Any]) -> None:
        """Say ``hello`` with the request's token on the program's connection, hand the
        process its request, and let go of both."""
        self.connection.send(
            {
                "type": wire.HELLO,
                "version": wire.PROTOCOL_VERSION,
                "pid": os.getpid(),
                "token": str(request.get("token", "")),
            }
        )
        data = json.dumps(request, separators=(",", ":")).encode()
        # A process that died meanwhile never sends ``done``: the host judges that.
        with contextlib.suppress(OSError), os.fdopen(self.pipe, "wb") as pipe:
            pipe.write(data)
        self.connection.close()

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.pipe)
        self.connection.close()


def _fork_spare(
    socket_path: str,
    control: Connection,
    wake: tuple[int, int],
    run_program: Callable[[Connection, dict[str, Any]], None],
) -> _Spare:
    connection = Connection(socket_path)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the program's process
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for fd in (*wake, write_end):
                os.close(fd)
            control.close()
            with os.fdopen(read_end, "rb") as pipe:
                data = pipe.read()
            if data:
                run_program(connection, json.loads(data))
        finally:
            os._exit(70)
    os.close(read_end)
    return _Spare(child, connection, write_end)


def serve(
    control: Connection,
    socket_path: str,
    request: dict[str, Any],
    run_program: Callable[[Connection, dict[str, Any]], None],
    before_program: Callable[[dict[str, Any]], None],
) -> int:
    """Serve ``run`` frames from ``control``, ``request`` first, each in a fresh process
    running ``run_program(connection, request)`` (which must not return); before each
    program's process is forked, every other process is gone and ``before_program(request)``
    has prepared the container. The next program's process is forked as soon as the previous
    one exits (:class:`_Spare`). Returns the runner's exit status once the host closes
    ``control``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _not_dumpable()
    wake = os.pipe()
    for fd in wake:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake[1])
    signal.signal(signal.SIGCHLD, lambda _signal, _frame: None)

    def spare_after(previous: dict[str, Any]) -> _Spare | None:
        if not clear_processes():
            return None
        before_program(previous)
        return _fork_spare(socket_path, control, wake, run_program)

    spare = spare_after(request)
    while True:  # ``request`` is the ``run`` frame to serve now
        if spare is None or other_processes(os.getpid()) != [spare.pid]:
            # The previous program's process still runs, or the spare died: from nothing.
            if spare is not None:
                spare.discard()
            spare = spare_after(request)
            if spare is None:
                return 5
        running: int | None = spare.pid
        spare.start(request)
        spare = None
        while True:
            following = _next_event(control, wake[0], running)
            if following is None:
                clear_processes()
                return 0
            if isinstance(following, str):  # the program's process exited
                running = None
                spare = spare_after(request)
                if spare is None:
                    return 5
                continue
            request = following
            break


def _next_event(control: Connection, wake: int, child: int | None) -> dict[str, Any] | str | None:
    """What happens next: the program's process ``child`` exited (``"exited"``), or the
    next ``run`` frame came (the frame). ``None`` when the host closed ``control``."""
    # poll, not select: gVisor refuses select() to this process.
    waiting = select.poll()
    waiting.register(control.fileno(), select.POLLIN)
    waiting.register(wake, select.POLLIN)
    while True:
        ready = {fd for fd, _ in waiting.poll()}
        if wake in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake, 512):
                    pass
            if child is not None:
                try:
                    done, _ = os.waitpid(child, os.WNOHANG)
                except ChildProcessError:
                    done = child
                if done == child:
                    return "exited"
        if control.fileno() in ready:
            try:
                request = control.recv()
            except (ConnectionError, OSError, ValueError):
                return None
            if request.get("type") != wire.RUN:
                return None
            return request


__all__ = ["clear_processes", "other_processes", "serve"]
