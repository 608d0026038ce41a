"""Ending what the programs of a kept container left, and telling what was left when that
could not be done.

Standard library only; shipped in the image next to the runner. The zygote
(``airlock_zygote``) clears the container before each program's process is forked: it ends
every other process, waits until they are reaped, until it has no thread but those it began
to serve with, and until no Unix socket is left but its own and the host's ends of bridge
connections. When that does not happen in time it gives up on the container, and tells the
host what it found left (:func:`leftovers`).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import time

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from typing import Any

    from airlock.sandbox.guest.airlock_bridge import Connection

CLEAR_TIMEOUT_S = 3.0
"""How long the zygote tries to end a program's leftovers before it gives up (and exits, so
that the host drops the container)."""
_SOCKETS_WAIT_S = 0.25
"""How long, of the clearing's time, the zygote waits for the kernel to free sockets a
program parked: Linux frees them at once when asked (:func:`_collect_unix_garbage`), gVisor
never; a container the zygote gives up on goes sooner, before a next program comes to it."""

_LISTINGS_AT_MOST = 100
"""Listings of a process's threads taken until two in a row agree (:func:`own_threads`)."""
_NAMED_AT_MOST = 8
"""Processes or threads named in what the host is told was left (the rest are counted)."""


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
    """The thread ids of process ``me`` (just ``me`` where ``/proc`` does not list them).

    Linux lists a process's threads by going from each to the next, and stops early when the
    thread it reached exits meanwhile: every thread after it is left out. A listing that
    missed one thread would have the zygote take the threads it begins to serve with for
    fewer than they are (and give up on its container at its first clearing, the missed
    thread one it "did not begin with"), or a clearing miss a thread. So a listing counts
    once the next one agrees with it: a thread exits once, and a listing that begins after
    that has it right."""
    seen = _thread_list(me)
    for _ in range(_LISTINGS_AT_MOST):
        again = _thread_list(me)
        if again == seen:
            break
        seen = again
    return seen


def _thread_list(me: int) -> frozenset[int]:
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
    timeout: float = CLEAR_TIMEOUT_S,
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
        reap()
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
            drain(watch[1])


def drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 512):
            pass


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def leftovers(me: int, threads: frozenset[int], bridge: str | None) -> str:
    """What a clearing that gave up found left, as the host is told it: the processes other
    than ``me``, the threads of ``me`` outside ``threads``, and the count of sockets no
    process holds (each process and thread by id and name; the names are a program's to
    choose, so they are quoted, and a few are named at most)."""
    found = []
    others = other_processes(me)
    if others:
        found.append(f"{len(others)} other process(es) ({_named(others)})")
    extra = sorted(own_threads(me) - threads)
    if extra:
        found.append(f"{len(extra)} thread(s) it did not begin with ({_named(extra, me)})")
    with contextlib.suppress(OSError):
        sockets = foreign_sockets(bridge)
        if sockets:
            found.append(f"{len(sockets)} socket(s) no process holds")
    return ", ".join(found) or "nothing was left by the time it looked again"


def _named(ids: list[int], process: int | None = None) -> str:
    names = []
    for task in ids[:_NAMED_AT_MOST]:
        where = f"/proc/{task}" if process is None else f"/proc/{process}/task/{task}"
        try:
            with open(f"{where}/comm", encoding="utf-8", errors="replace") as comm:
                names.append(f"{task} {comm.read().strip()!r}")
        except OSError:
            names.append(f"{task} (gone)")
    return ", ".join(names) + (", ..." if len(ids) > _NAMED_AT_MOST else "")


__all__ = [
    "CLEAR_TIMEOUT_S",
    "bridge_name",
    "clear_processes",
    "drain",
    "foreign_sockets",
    "leftovers",
    "other_processes",
    "own_threads",
    "reap",
]
