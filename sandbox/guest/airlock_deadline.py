"""The guest's own end of a program, for when the host cannot end it.

Standard library only; shipped in the image next to the runner. The host ends a run at its
deadline by destroying the container. A host killed mid-run, or one stuck, ends nothing, and
the program would run on (and spend the machine's CPU) until some later start of a backend
removes the container. Two backstops keep the deadline the README promises without the host,
and neither costs a run's request its time (each is made ready before the program comes):

- the host's end: a one-program runner exits as soon as the host has closed the bridge (a
  host that dies has its sockets closed by the kernel); it watches from the moment it is
  connected (:class:`Backstops`). The runner is the container's init: its exit stops the
  container, and every process the program started with it. A kept container's zygote does
  the same on its own (``airlock_zygote``: its control connection).
- the ``run`` frame's ``deadline_s``, counted from the moment the program came: a one-program
  runner's process exits then whatever the program does (:meth:`Backstops.end_by`), and its
  container stops; a kept program's process reports its deadline to the zygote before any of
  the program's code runs (:func:`report`), and the zygote, which waits on its processes
  anyway, ends them then (:class:`Countdown`). ``deadline_s`` is the program's ``timeout_s``
  plus a margin past the host's own handling of its deadline, so a run's outcome is the
  host's (a ``timeout``), never this.

A one-program runner's backstops are no boundary: a program in ``full`` mode can undo them
(they are the program's own process); a kept program's deadline is the zygote's, out of its
reach. The host still enforces the deadline and reaps what is left.
"""

from __future__ import annotations

import _thread
import os
import select
import struct
import time

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)

_LOOK_EVERY_S = 0.2
"""How often the runner looks whether the host has hung up. It looks rather than waits in
``poll``: a descriptor being polled holds its socket open, so a program that closes its end of
the bridge (the host must then see it closed) would not close it until the wait ended."""
_LONGEST_S = 10.0**8
"""Longer than any deadline (and than ``faulthandler`` takes)."""
_REPORT = struct.Struct("<d")
"""A kept program's deadline on its pipe to the zygote: seconds, one write (atomic)."""
REPORTED_GRACE_S = 0.01
"""How long after a kept program's process stopped itself, having reported, the zygote ends
it and what the program left, if the host's next token has not come first (it comes once
the host has handed the result on: well within this, unless the host is held up)."""


def _seconds(value: object) -> float | None:
    """``value`` as a deadline in seconds, or ``None`` (not a positive number, or too long)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 < value < _LONGEST_S else None


class Backstops:
    """A one-program runner's ends of its program, made ready as soon as it is connected
    over ``bridge`` (a socket's descriptor): while it warms up and waits, the host's end is
    watched already, and the program's request pays for no more than starting the
    deadline's watchdog. A kept runner's zygote ends its programs itself: :meth:`drop`."""

    def __init__(self, bridge: int) -> None:
        import faulthandler  # built in: no file to load, but loading it takes a while

        self._faulthandler = faulthandler
        try:
            self._sink = os.open(os.devnull, os.O_WRONLY)
        except OSError:
            self._sink = 0  # /dev/null as well (airlock_output.isolate_descriptors)
        self._stop = _thread.allocate_lock()
        self._stop.acquire()
        try:
            identity = _identity(bridge)
        except OSError:
            return
        _thread.start_new_thread(_watch, (bridge, identity, self._stop))

    def end_by(self, seconds: object) -> None:
        """Exit this process (status 1) ``seconds`` from now whatever the program does;
        nothing when ``seconds`` is not a positive number (a ``run`` frame without
        ``deadline_s``).

        ``faulthandler``'s watchdog counts the time: a thread of the interpreter's own that
        needs no interpreter lock, so a program inside one long call into C (a regular
        expression that backtracks, arithmetic on a huge integer) ends too. It is armed by
        the thread that then runs the program, before the program's code can hold the lock:
        no other thread could be sure to get the lock to arm it. It writes the program's
        traceback first, to ``/dev/null``.
        """
        deadline = _seconds(seconds)
        if deadline is not None:
            self._faulthandler.dump_traceback_later(deadline, exit=True, file=self._sink)

    def drop(self) -> None:
        """Stop watching the host's end and close the watchdog's ``/dev/null``: the runner
        becomes a kept container's zygote, which watches its control connection itself,
        holds no thread but those it began to serve with and passes no descriptor on to
        its programs' processes."""
        self._stop.release()
        if self._sink:
            os.close(self._sink)
            self._sink = 0


def _identity(fd: int) -> tuple[int, int]:
    stat = os.fstat(fd)
    return stat.st_dev, stat.st_ino


def _watch(bridge: int, identity: tuple[int, int], stop: _thread.LockType) -> None:
    looking = select.poll()  # poll, not select: gVisor refuses select() to the runner
    # Hang-ups (POLLHUP, POLLERR) are reported whatever is asked; POLLRDHUP is the host's end
    # shut: never a frame that waits to be read.
    looking.register(bridge, select.POLLRDHUP)
    while not stop.acquire(True, _LOOK_EVERY_S):
        try:
            events = looking.poll(0)
            if not events:
                continue
            if events[0][1] & select.POLLNVAL or _identity(bridge) != identity:
                return  # the program closed the bridge itself: end_by is left
        except OSError:
            return
        os._exit(0)


def report(pipe: int, seconds: object) -> None:
    """Tell the zygote over ``pipe`` (a kept program's process's end, closed here) that the
    program came, with its ``run`` frame's ``deadline_s``; nothing is written when that is
    no deadline. Called before any of the program's code runs: the program cannot write
    first, and whatever it could write later, the zygote reads no more."""
    deadline = _seconds(seconds)
    try:
        if deadline is not None:
            os.write(pipe, _REPORT.pack(deadline))
    except OSError:
        pass  # the zygote is gone: the container with it
    finally:
        os.close(pipe)


class Countdown:
    """The zygote's side of a kept program's deadline: ``pipe`` (the read end of the pipe
    given to the program's process) until its report comes, then the time the program's
    processes are ended by (monotonic), counted from that report."""

    def __init__(self, pipe: int) -> None:
        self.pipe: int | None = pipe
        self.ends_at: float | None = None

    def read(self) -> None:
        """Read the report (:func:`report`) and close the pipe; a pipe closed without one
        (the process ended, or its program came without a deadline) sets none."""
        if self.pipe is None:
            return
        try:
            data = os.read(self.pipe, _REPORT.size)
        except OSError:
            data = b""
        self.close()
        if len(data) == _REPORT.size:
            (seconds,) = _REPORT.unpack(data)
            if _seconds(seconds) is not None:  # (neither NaN nor infinite)
                ends_at = time.monotonic() + seconds
                self.ends_at = ends_at if self.ends_at is None else min(self.ends_at, ends_at)

    def wait_ms(self) -> int:
        """How long the zygote may wait before it ends the program (``-1``: no deadline)."""
        if self.ends_at is None:
            return -1
        return max(int((self.ends_at - time.monotonic()) * 1000) + 1, 0)

    def reported(self) -> None:
        """The program's process reported and stopped: the program ends within
        :data:`REPORTED_GRACE_S` (never later than its deadline)."""
        soon = time.monotonic() + REPORTED_GRACE_S
        self.ends_at = soon if self.ends_at is None else min(self.ends_at, soon)

    @property
    def passed(self) -> bool:
        """Whether the program's deadline has passed."""
        return self.ends_at is not None and time.monotonic() >= self.ends_at

    def close(self) -> None:
        """Let go of the pipe (once read, or when its process is discarded unstarted)."""
        pipe, self.pipe = self.pipe, None
        if pipe is not None:
            os.close(pipe)


__all__ = ["REPORTED_GRACE_S", "Backstops", "Countdown", "report"]
