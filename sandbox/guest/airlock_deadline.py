"""The guest's own end of a program, for when the host cannot end it.

Standard library only; shipped in the image next to the runner. The host ends a run at its
deadline by destroying the container. A host killed mid-run, or one stuck, ends nothing, and
the program would run on (and spend the machine's CPU) until some later start of a backend
removes the container. Two backstops keep the deadline the README promises without the host:

- :func:`end_with_host`: a one-program runner exits as soon as the host has closed the bridge
  (a host that dies has its sockets closed by the kernel). The runner is the container's
  init: its exit stops the container, and every process the program started with it. A kept
  container's zygote does the same on its own (``airlock_zygote``: its control connection).
- :func:`end_by`: the ``run`` frame's ``deadline_s`` after the program began, its process
  exits whatever the program does; a one-program runner's container stops, a kept program's
  process ends and the zygote then ends whatever it left. ``deadline_s`` is the program's
  ``timeout_s`` plus a margin past the host's own handling of its deadline, so a run's
  outcome is the host's (a ``timeout``), never this.

Neither backstop is a boundary: a program in ``full`` mode can undo both (they are the
program's own process), and the host still enforces the deadline and reaps what is left.
"""

from __future__ import annotations

import _thread
import os
import select
import time

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)

_LOOK_EVERY_S = 0.2
"""How often the runner looks whether the host has hung up. It looks rather than waits in
``poll``: a descriptor being polled holds its socket open, so a program that closes its end of
the bridge (the host must then see it closed) would not close it until the wait ended."""
_LONGEST_S = 10.0**8
"""Longer than any deadline (and than ``faulthandler`` takes)."""


def end_with_host(bridge: int) -> None:
    """Exit this process (status 0) once the host has closed the bridge socket ``bridge``
    (a thread looks every :data:`_LOOK_EVERY_S`). A program that closes the descriptor
    itself, or puts another file in its place, is left to :func:`end_by`."""
    try:
        identity = _identity(bridge)
    except OSError:
        return
    _thread.start_new_thread(_watch, (bridge, identity))


def _identity(fd: int) -> tuple[int, int]:
    stat = os.fstat(fd)
    return stat.st_dev, stat.st_ino


def _watch(bridge: int, identity: tuple[int, int]) -> None:
    looking = select.poll()  # poll, not select: gVisor refuses select() to the runner
    # Hang-ups (POLLHUP, POLLERR) are reported whatever is asked; POLLRDHUP is the host's end
    # shut: never a frame that waits to be read.
    looking.register(bridge, select.POLLRDHUP)
    while True:
        time.sleep(_LOOK_EVERY_S)
        try:
            events = looking.poll(0)
            if not events:
                continue
            if events[0][1] & select.POLLNVAL or _identity(bridge) != identity:
                return  # the program closed the bridge itself
        except OSError:
            return
        os._exit(0)


def end_by(seconds: object) -> None:
    """Exit this process (status 1) ``seconds`` from now whatever the program does; nothing
    when ``seconds`` is not a positive number (a ``run`` frame without ``deadline_s``).

    ``faulthandler``'s watchdog counts the time: a thread of the interpreter's own that needs
    no interpreter lock, so a program inside one long call into C (a regular expression that
    backtracks, arithmetic on a huge integer) ends too. It writes the program's traceback
    first, to ``/dev/null``.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return
    if not 0 < seconds < _LONGEST_S:
        return
    import faulthandler  # built in: no file to load

    try:
        sink = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        sink = 0  # /dev/null as well (airlock_output.isolate_descriptors)
    faulthandler.dump_traceback_later(float(seconds), exit=True, file=sink)


__all__ = ["end_by", "end_with_host"]
