"""A kept container's next program's process, forked by the zygote before its program is known.

Standard library only. The zygote (``airlock_zygote``) forks it once the container is clear
after the previous program, with a bridge connection of its own open, and two pipes: one on
which the zygote tells it that it said ``hello`` for it (the host may then send its program),
and one on which the process tells the zygote that its program came, and by when it must end
(``airlock_deadline.report``): the zygote ends it then, if the host has not.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airlock.bridge import airlock_wire as wire
    from airlock.sandbox.guest import airlock_deadline as deadline
    from airlock.sandbox.guest.airlock_bridge import Connection
else:
    import airlock_deadline as deadline
    import airlock_wire as wire
    from airlock_bridge import Connection


class ProgramStart:
    """The program's process's ends of its two pipes with the zygote."""

    def __init__(self, started: int, begun: int) -> None:
        self._started = started
        self._begun = begun

    def wait(self) -> bool:
        """Wait until the zygote has said ``hello`` for this process (``False``: it never
        will)."""
        try:
            started = os.read(self._started, 1) == b"1"
        except OSError:
            started = False
        os.close(self._started)
        return started

    def begin(self, deadline_s: object) -> None:
        """Tell the zygote the program came, with its ``run`` frame's ``deadline_s``: before
        any of the program's code runs."""
        deadline.report(self._begun, deadline_s)


RunProgram = Callable[[Connection, dict[str, Any], ProgramStart], None]
"""What runs in a program's process: ``run_program(connection, ahead, start)`` (see
:class:`ProgramStart`), which must not return."""


class Spare:
    """The next program's process, forked when its token came, once the container was
    cleared after the previous one, with a bridge connection open on which nothing was said
    yet, a pipe on which the zygote tells it when it did, and the :attr:`countdown` of its
    program's deadline."""

    def __init__(
        self,
        pid: int,
        connection: Connection,
        started: int,
        begun: int,
        ahead: dict[str, Any],
    ) -> None:
        self.pid = pid
        self.connection = connection
        self.started = started
        self.countdown = deadline.Countdown(begun)
        self.ahead = ahead

    def start(self, token: str) -> None:
        """Say ``hello`` with ``token`` on the process's connection (it then receives its
        program there), tell the process, and let go of both."""
        hello = {"type": wire.HELLO, "version": wire.PROTOCOL_VERSION, "pid": os.getpid()}
        try:
            self.connection.send({**hello, "token": token})
            os.write(self.started, b"1")
        except OSError:
            pass  # the host judges a program whose connection never came
        finally:
            self._let_go()

    def discard(self) -> None:
        """Let go of the process's connection and pipes (the process goes with the next
        clearing); the zygote never reads a program's connection."""
        self._let_go()
        self.countdown.close()

    def _let_go(self) -> None:
        self.connection.close()
        with contextlib.suppress(OSError):
            os.close(self.started)


def fork_spare(
    socket_path: str,
    control: Connection,
    wake: tuple[int, int],
    ahead: dict[str, Any],
    run_program: RunProgram,
) -> Spare:
    """Open the next program's connection and fork the process that will run the program on
    it, once the zygote has said ``hello`` there."""
    connection = Connection(socket_path)
    started_read, started_write = os.pipe()
    begun_read, begun_write = os.pipe()
    child = os.fork()
    if child == 0:  # the program's process
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for fd in (*wake, started_write, begun_read):
                os.close(fd)
            control.close()
            run_program(connection, ahead, ProgramStart(started_read, begun_write))
        finally:
            os._exit(70)
    os.close(started_read)
    os.close(begun_write)
    return Spare(child, connection, started_write, begun_read, ahead)


__all__ = ["ProgramStart", "RunProgram", "Spare", "fork_spare"]
