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
   ``airlock_leftovers``); it empties ``/out`` (and, for a clean container, ``/tmp``);
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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airlock.bridge import airlock_wire as wire
    from airlock.sandbox.guest import airlock_leftovers as leftover
    from airlock.sandbox.guest.airlock_bridge import Connection
    from airlock.sandbox.guest.airlock_spare import RunProgram, Spare, fork_spare
else:
    import airlock_leftovers as leftover
    import airlock_wire as wire
    from airlock_bridge import Connection
    from airlock_spare import RunProgram, Spare, fork_spare

_PR_SET_DUMPABLE = 4


def tell_exit(control: Connection, status: int, reason: str) -> int:
    """Tell the host, on ``control``, why the runner exits with ``status`` (its last frame:
    ``airlock_wire.EXIT``); ``status``. Nothing is lost if the host is gone already."""
    frame = {"type": wire.EXIT, "status": status, "reason": reason[: wire.MAX_EXIT_REASON_CHARS]}
    with contextlib.suppress(OSError, ValueError):
        control.send(frame)
        # A socket closed with bytes unread resets the host's end, and a reset drops what
        # the host had not read yet (this frame): what the host sent meanwhile (a next
        # token, of no use now) is read first.
        unread = select.poll()
        unread.register(control.fileno(), select.POLLIN)
        while unread.poll(0) and os.read(control.fileno(), 1 << 16):
            pass
    return status


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
    could not be cleared (5) or the frame holds no token (3); before it gives up so, it tells
    the host why (:func:`tell_exit`)."""
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
    threads = leftover.own_threads(me)
    bridge = leftover.bridge_name(control)

    def cleared() -> bool:
        return leftover.clear_processes(wake=wake[0], threads=threads, bridge=bridge)

    def give_up() -> int:
        left = leftover.leftovers(me, threads, bridge)
        why = f"it could not clear the container in {leftover.CLEAR_TIMEOUT_S:g} s: {left}"
        return tell_exit(control, 5, why)

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
            return tell_exit(control, 3, "a run frame came without a token")
        ahead = {"keep": request.get("keep"), "mode": request.get("mode")}
        if spare is not None and (
            spare.ahead["keep"] != ahead["keep"]
            or leftover.other_processes(me) != [spare.pid]
            or not leftover.own_threads(me) <= threads
        ):
            # The previous program's process still runs, the spare died, or it was made
            # for another kind of program: from nothing.
            spare.discard()
            spare = None
        if spare is None:
            spare = spare_after(ahead)
            if spare is None:
                return give_up()
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
                return give_up()
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
            leftover.drain(wake)
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
            leftover.reap()
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


__all__ = ["serve", "tell_exit"]
