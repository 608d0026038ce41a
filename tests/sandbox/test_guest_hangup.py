"""A runner whose host lets it go before its program: it ends, with status 0.

A pool's close (or a backend's) closes the bridge of each container it holds: the runner,
waiting for its ``run`` frame, reads the end, and its exit stops the container. That is the
host's end, not the runner's failure: it exits 0, as its watch of the host's end does. A frame
the runner cannot read is another matter: it still ends with status 1.
"""

from __future__ import annotations

import select
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from airlock.bridge.airlock_wire import RUN_WAITING, WARM_WHEN_IDLE
from tests.sandbox.guest_image import RUNNER

_EXIT_S = 30.0
"""A runner warms up before its hello: seconds, on a loaded machine."""


def _closed(conn: socket.socket) -> None:
    """The hello read, then the bridge closed: the runner reads the end."""
    (size,) = struct.unpack(">I", conn.recv(4, socket.MSG_WAITALL))
    conn.recv(size, socket.MSG_WAITALL)
    conn.close()


def _reset(conn: socket.socket) -> None:
    """The bridge closed with the hello unread: the runner's next read is reset."""
    select.select([conn], [], [], _EXIT_S)
    conn.close()


def _bad_frame(conn: socket.socket) -> None:
    """A header announcing more than any frame of the host's may hold; the bridge left open."""
    conn.sendall(struct.pack(">I", 2**31))


HANG_UPS = [
    ("closed", (), _closed, 0),
    ("reset", (), _reset, 0),
    ("closed-run-waiting", (RUN_WAITING,), _closed, 0),
    ("reset-run-waiting", (RUN_WAITING,), _reset, 0),
    ("closed-warm-when-idle", (WARM_WHEN_IDLE,), _closed, 0),
    ("reset-warm-when-idle", (WARM_WHEN_IDLE,), _reset, 0),
    ("bad-frame", (), _bad_frame, 1),
]


@pytest.mark.parametrize(
    ("flags", "hang_up", "status"), [c[1:] for c in HANG_UPS], ids=[c[0] for c in HANG_UPS]
)
def test_a_runner_waiting_for_its_program_exits_by_how_the_host_ended_it(
    flags: tuple[str, ...], hang_up: Callable[[socket.socket], None], status: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "bridge.sock")
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(path)
            listener.listen(1)
            listener.settimeout(_EXIT_S)
            command = [sys.executable, "-I", str(RUNNER), path, *flags]
            child = subprocess.Popen(command, env={})
            try:
                conn, _ = listener.accept()
                with conn:
                    hang_up(conn)
                    assert child.wait(timeout=_EXIT_S) == status
            finally:
                child.kill()
                child.wait()
