"""A kept container's first process: it never runs a program, it forks one process per program.

Standard library only. A container that serves more than one program (a kept session's
conversation) must not let one program reach the next: a thread it left could forge the next
answer, a child could make calls in the next program's name, a patched module could change
how the next result is sent. So the runner, once warm, becomes a *zygote*:

1. it holds the control connection to the host (the one it said ``hello`` on) and reads
   ``run`` frames from it; no program's process ever holds that connection, and no program
   ever travels on it: a ``run`` frame there holds only the next program's one-time
   ``token`` and what the host expects of that program (``keep``, ``mode``). The host sends
   one when a kept container takes its first program, and again once it has handed on the
   result of each program (or has given up on it);
2. for each, it ends every other process in the container (``kill(-1, SIGKILL)`` from the
   container's init, then reaping, woken by each child's exit) and checks the container's pid
   list (``/proc``) until it holds no process but its own and it has no thread but those it
   had when it began to serve (before any program ran: see :func:`serve`), and the
   container's Unix sockets (``/proc/net/unix``) until none is left but its own (see
   :func:`foreign_sockets`); it empties ``/out`` (and, for a clean container, ``/tmp``);
3. then it opens a new bridge connection, says ``hello`` on it with the token (which no
   program's process has seen: the host sends it once the previous program's process was
   forked, and only this process reads the control connection, so the host can tell the
   program's connection from any other), and forks the next program's process with it. So
   the process exists, connected and checked by the host, before its program is asked for:
   a run then pays neither the clearing nor the fork nor the connection, only its own work;
4. the program's process has closed the control connection; while it waits it loads the
   seccomp layer all modes share, runs a small program of the runner's own through the real
   path (a fresh process pays for its first touch of each page it shares with the zygote),
   and starts capturing its output; then it receives its ``run`` frame (the program) on its
   own connection, tells the zygote that its program came and by when it must end (the
   ``run`` frame's ``deadline_s``, ``airlock_deadline``), adds its mode's layer and runs the
   program; the host closes the connection after ``done``. A process that reported does not
   exit (its exit, and the clearing it would wake, would compete with the host's taking of
   the result for a processor): it stops itself, every thread of it, and the next frame's
   clearing ends it with whatever it started, or ``REPORTED_GRACE_S`` (``airlock_deadline``)
   after its stop at the latest. One that exits (its program did not report) is cleared
   after at once, and one still running at its deadline (its host killed or stuck) is ended
   then, as one that exited.

The zygote is the container's init (pid 1): no program can signal it away, and every orphan
becomes its child, to be reaped. It is not dumpable, so no other process of the same user
can read or write its memory. It exits when the host closes the control connection.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import select
import signal
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airlock.bridge import airlock_wire as wire
    from airlock.sandbox.guest.airlock_bridge import Connection
    from airlock.sandbox.guest.airlock_spare import RunProgram, Spare, fork_spare
else:
    import airlock_wire as wire
    from airlock_bridge import Connection
    from airlock_spare import RunProgram, Spare, fork_spare

_CLEAR_TIMEOUT_S = 3.0
"""How long the zygote tries to end a program's leftovers before it gives up (and exits, so
that the host drops the container)."""
_SOCKETS_WAIT_S = 0.25
"""How long, of the clearing's time, the zygote waits for the kernel to free sockets a
program parked: Linux frees them at once when asked (:func:`_collect_unix_garbage`), gVisor
never; a container the zygote gives up on goes sooner, before a next program comes to it."""
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


def own_threads(me: int) -> frozenset[int]:
    """The thread ids of process ``me`` (just ``me`` where ``/proc`` does not list them)."""
    try:
        return frozenset(int(tid) for tid in os.listdir(f"/proc/{me}/task"))
    except (OSError, ValueError):
        return frozenset({me})


def foreign_sockets(bridge: str | None = None) -> list[str]:
    """The inodes of the container's Unix sockets (``/proc/net/unix``) that are neither this
    process's own (its descriptors') nor the host's ends of bridge connections (which
    Linux lists here, named as the host's socket, ``bridge``). Once every other process is
    gone, any left is one a program parked where no process holds it (sent with
    ``SCM_RIGHTS`` over a socket itself in flight): it outlives the program, the next
    program could read its name or count such sockets, and gVisor never frees their
    memory."""
    own = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # (the listing's own descriptor is gone)
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("socket:["):
                own.add(link[len("socket:[") : -1])
    with open("/proc/net/unix") as table:
        # Num RefCount Protocol Flags Type St Inode [Path], under a heading line
        rows = [line.split(None, 7) for line in table.read().splitlines()[1:]]
    return [
        row[6]
        for row in rows
        if len(row) > 6 and row[6] not in own and (len(row) < 8 or row[7] != bridge)
    ]


def bridge_name(control: Connection) -> str | None:
    """The host's socket, as Linux names the host's ends of bridge connections."""
    try:
        with socket.socket(fileno=os.dup(control.fileno())) as duplicate:
            name = duplicate.getpeername()
    except OSError:
        return None
    return name if isinstance(name, str) and name else None


def _collect_unix_garbage() -> None:
    # Linux collects sockets that only hold each other in flight when a Unix socket is
    # released after they became unreachable; a program's last holder may have gone first.
    with contextlib.suppress(OSError):
        socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0].close()


def clear_processes(
    timeout: float = _CLEAR_TIMEOUT_S,
    wake: int | None = None,
    *,
    threads: frozenset[int] | None = None,
    bridge: str | None = None,
) -> bool:
    """End every process in the container but this one and wait until the pid list shows
    none (zombies reaped), this process has no thread outside ``threads`` (by default, none
    but its main thread) and no Unix socket is left but its own and the host's ends of
    bridge connections, named ``bridge`` (:func:`foreign_sockets`);
    whether that happened within ``timeout`` seconds. ``wake`` is the read end of the
    zygote's signal pipe: a child's exit wakes the wait at once."""
    me = os.getpid()
    allowed = threads if threads is not None else frozenset({me})
    end = time.monotonic() + timeout
    watch: tuple[Any, int] | None = None
    if wake is not None:
        poller = select.poll()
        poller.register(wake, select.POLLIN)
        watch = (poller, wake)
    while True:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)  # every process this user may signal, but init and me
        _reap()
        if not other_processes(me) and own_threads(me) <= allowed:
            if not foreign_sockets(bridge):
                return True
            _collect_unix_garbage()
            end = min(end, time.monotonic() + _SOCKETS_WAIT_S)
        if time.monotonic() > end:
            return False
        if watch is None:
            time.sleep(0.0005)
        else:
            # A process that is not our child (one the engine started) wakes nobody: look
            # again after a millisecond whatever happens.
            watch[0].poll(1)
            _drain(watch[1])


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 512):
            pass


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


def serve(
    control: Connection,
    socket_path: str,
    first: dict[str, Any],
    run_program: RunProgram,
    before_program: Callable[[dict[str, Any]], None],
) -> int:
    """Serve a kept container: for each ``run`` frame from ``control`` (``first`` first),
    which holds the next program's one-time ``token`` and what the host expects of it
    (``keep``, ``mode``: the frame without the token is ``ahead``), make sure the container
    holds nothing but the next program's process, forked after every other process was ended
    and ``before_program(ahead)`` prepared the container, and say ``hello`` with the token on
    its connection. That process runs ``run_program`` (see :data:`RunProgram`) and receives
    its program on the connection. Whatever a program left is ended once its process exits,
    or its deadline passes, or the next frame comes, or a moment after its process stopped
    itself, having reported; the next process is forked when the next frame comes. Returns
    the runner's exit status once the host closes ``control`` (0), or when the container
    could not be cleared (5) or the frame holds no token (3)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _not_dumpable()
    wake = os.pipe()
    for fd in wake:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake[1])
    signal.signal(signal.SIGCHLD, lambda _signal, _frame: None)
    # Every object the runner made so far stays where it is: a collection in a program's
    # process would otherwise touch (and so copy) every page of the warm interpreter.
    gc.freeze()
    me = os.getpid()
    # The threads this process has now are its own, started by the runner's warm-up before
    # any program ran: an image's native libraries (the data image's BLAS pool, sized to the
    # CPU quota, which OpenBLAS ends before each fork and a program's process starts afresh).
    # No program's thread can join this process (programs run in processes forked from it):
    # a thread beyond these means the container is not what it should be, and clearing fails.
    threads = own_threads(me)
    bridge = bridge_name(control)

    def cleared() -> bool:
        return clear_processes(wake=wake[0], threads=threads, bridge=bridge)

    def spare_after(ahead: dict[str, Any]) -> Spare | None:
        if not cleared():
            return None
        before_program(ahead)
        return fork_spare(socket_path, control, wake, ahead, run_program)

    spare: Spare | None = None
    request: dict[str, Any] | None = first
    while request is not None:
        token = request.get("token")
        if not isinstance(token, str) or not token:
            return 3
        ahead = {"keep": request.get("keep"), "mode": request.get("mode")}
        if spare is not None and (
            spare.ahead["keep"] != ahead["keep"]
            or other_processes(me) != [spare.pid]
            or not own_threads(me) <= threads
        ):
            # The previous program's process still runs, the spare died, or it was made
            # for another kind of program: from nothing.
            spare.discard()
            spare = None
        if spare is None:
            spare = spare_after(ahead)
            if spare is None:
                return 5
        running: Spare | None = spare
        spare.start(token)
        spare = None
        while True:
            event = _next_event(control, wake[0], running)
            if not isinstance(event, str):
                request = event
                break
            # The program's process exited without reporting, or its deadline passed (a host
            # killed or stuck ends nothing; a process that reported stopped itself, and its
            # deadline is a moment after): end whatever it left now. The next process is
            # forked when its token comes: the host sends it once it has handed on this
            # program's result, which a fork would compete with for a processor.
            if running is not None:
                running.countdown.close()
                running = None
            if not cleared():
                return 5
        if running is not None:
            running.countdown.close()  # a descriptor no later program's process may get
    if spare is not None:
        spare.discard()
    cleared()
    return 0


def _next_event(
    control: Connection, wake: int, running: Spare | None
) -> dict[str, Any] | str | None:
    """What happens next: the process of the program ``running`` exited (``"exited"``) or
    its program's deadline passed (``"overdue"``), or the next ``run`` frame came (the
    frame); ``None`` when the host closed ``control`` or sent anything else. Children are
    reaped meanwhile, the program's report of its deadline is read as it comes, and its
    process's stop (it reported) brings its deadline near."""
    # poll, not select: gVisor refuses select() to this process.
    waiting = select.poll()
    waiting.register(control.fileno(), select.POLLIN)
    waiting.register(wake, select.POLLIN)
    countdown = running.countdown if running is not None else None
    if countdown is not None and countdown.pipe is not None:
        waiting.register(countdown.pipe, select.POLLIN)
    while True:
        try:
            # A frame that came with the previous one is read already: no poll would see it.
            buffered = control._next_frame()
        except (ConnectionError, ValueError):
            return None
        ready = {control.fileno()} if buffered is not None else set()
        if not ready:
            ready = {fd for fd, _ in waiting.poll(countdown.wait_ms() if countdown else -1)}
        if countdown is not None:
            if countdown.pipe is not None and countdown.pipe in ready:
                waiting.unregister(countdown.pipe)
                countdown.read()
            if countdown.passed:
                return "overdue"
        if wake in ready:
            _drain(wake)
            if running is not None:
                state = _state(running.pid)
                if state == "exited":
                    return "exited"
                if state == "stopped" and countdown is not None:
                    # It reported and stopped itself (airlock_kept_program): ended when
                    # the host's next token comes, or REPORTED_GRACE_S from now at the latest.
                    # (A program that stops its own process before it reports is taken at its
                    # word: ended too, its run told its process ended before it reported.)
                    countdown.reported()
            _reap()
        if control.fileno() in ready:
            try:
                request = buffered if buffered is not None else control.recv()
            except (ConnectionError, OSError, ValueError):
                return None
            if request.get("type") != wire.RUN:
                return None
            return request


def _state(child: int) -> str | None:
    """``"exited"`` (reaped now, or gone), ``"stopped"`` (a stop not seen before, or a
    continue after one: a process the program left may continue it before this looks), or
    ``None`` (running, or a stop seen already)."""
    try:
        pid, status = os.waitpid(child, os.WNOHANG | os.WUNTRACED | os.WCONTINUED)
    except ChildProcessError:
        return "exited"
    if pid != child:
        return None
    return "stopped" if os.WIFSTOPPED(status) or os.WIFCONTINUED(status) else "exited"


__all__ = ["clear_processes", "other_processes", "serve"]
