"""The guest's end of the bridge socket: bytes written as they come, bytes read into whole
frames.

Standard library only; shipped in the image next to the runner. Who reads, and what a frame
read means, is the connection's (``airlock_connection``, which builds on this).
"""

from __future__ import annotations

import _socket
import select
import time

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from typing import Any

    from airlock.sandbox.guest import airlock_frames as frames
else:  # in the image, the guest's modules sit side by side on the runner's path
    import airlock_frames as frames

_RECV_BYTES = 256 * 1024


class HostGone(ConnectionError):
    """The host closed its end of the bridge: every frame it sent has been read."""


HOST_GONE = (HostGone, ConnectionResetError, BrokenPipeError)
"""What reading or writing the bridge raises once the host has let it go (a reset: it closed
with bytes of ours unread)."""


class BridgeSocket:
    """The bridge socket at ``path``, connected; one reader at a time (the caller's lock)."""

    def __init__(self, path: str) -> None:
        self._sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        self._sock.connect(path)
        self._received = bytearray()  # read from the socket, not yet a whole frame
        self._scratch = memoryview(bytearray(_RECV_BYTES))
        self._readable = select.poll()
        self._readable.register(self._sock.fileno(), select.POLLIN)

    def fileno(self) -> int:
        """The bridge socket's descriptor (the runner keeps it open, and closes the rest)."""
        return self._sock.fileno()

    def close(self) -> None:
        """Close this end of the bridge (a kept program's process closes the zygote's), and
        let go of its read buffers. A kept container's zygote opens a connection for each
        program and closes its end: the connection (a cycle with its outbox) then waits for
        the collector, which the zygote's few allocations wake only every few dozen
        programs, and its buffer of ``_RECV_BYTES`` would wait with it. (Nothing reads a
        connection it closed; a read would raise ``ValueError``, which readers take for a
        closed bridge.)"""
        self._sock.close()
        self._received = bytearray()
        self._scratch = memoryview(bytearray())

    def wait_closed(self, timeout_s: float) -> None:
        """Wait, at most ``timeout_s``, until the host closes the bridge; what it still sends
        is dropped."""
        end = time.monotonic() + timeout_s
        try:
            while (left := end - time.monotonic()) > 0:
                self._sock.settimeout(left)
                if not self._sock.recv(_RECV_BYTES):
                    return
        except OSError:  # the timeout too
            return

    def _write(self, data: bytes) -> None:
        self._sock.sendall(data)

    def _recv(self) -> dict[str, Any]:
        while True:
            message = self._next_frame()
            if message is not None:
                return message
            self._fill(0)

    def _fill(self, flags: int) -> None:
        # Whatever the socket holds, up to the scratch buffer, in one system call. A blocking
        # read waits in poll(), not in recv(): Linux wakes a reader asleep in recv() on a Unix
        # socket each time the host reads what this end sent (the room made wakes every
        # waiter of the socket, whatever it waits for), a second wake-up for each call;
        # poll() wakes for bytes only.
        if not flags:
            if not self._scratch:  # closed (see close()): its descriptor may be another's now
                raise ValueError("the bridge socket is closed")
            self._readable.poll()
            flags = _socket.MSG_DONTWAIT
        count = self._sock.recv_into(self._scratch, _RECV_BYTES, flags)
        if not count:
            raise HostGone("the host closed the bridge")
        self._received += self._scratch[:count]

    def _next_frame(self) -> dict[str, Any] | None:
        """The next whole frame already received, or ``None``."""
        return frames.split_frame(self._received)

    def _fill_within(self, seconds: float) -> bool:
        """Whether bytes came within ``seconds`` (read, as :meth:`_fill`; ``False``: none)."""
        if not self._readable.poll(seconds * 1000):
            return False
        try:
            self._fill(_socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        return True


__all__ = ["BridgeSocket"]
