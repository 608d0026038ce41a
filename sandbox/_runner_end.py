"""The end of a kept runner's control connection, which the host holds while the container
waits for its next program and reads nothing on: watched for (:func:`watch_end`), checked at
the moment a run needs to know (:func:`hung_up`), and why the runner ended it, when it said
(:func:`last_word`).
"""

from __future__ import annotations

import asyncio
import select

from airlock.bridge import FrameError, read_frame
from airlock.bridge import airlock_wire as wire

__all__ = ["hung_up", "last_word", "watch_end"]

_LAST_WORD_WAIT_S = 0.2
"""How long a run that finds the runner gone waits for its last frame: it came before the
end, so the loop has it, or reads it in its next turns (the kernel holds it already)."""
_LAST_WORD_MAX_BYTES = 16 * wire.MAX_EXIT_REASON_CHARS


class _EndWatch(asyncio.Protocol):
    """Stands between the control connection's transport and its stream's protocol, passing
    everything on, and sets ``ended`` when the runner ends the connection. Nothing reads
    that connection while a kept container waits for its next program's (a stream tells of
    its end only to a reader), and reading it here would take what a run reads."""

    def __init__(self, inner: asyncio.Protocol, ended: asyncio.Event) -> None:
        self._inner = inner
        self._ended = ended

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        self._ended.set()
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended.set()
        # A runner that exits with the host's bytes unread (a token sent as it gave up)
        # resets the connection; a stream that took the reset would refuse what it holds
        # already, the runner's last word among it, so it is told of an end instead.
        self._inner.connection_lost(None if isinstance(exc, ConnectionResetError) else exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


def watch_end(control: asyncio.StreamWriter, ended: asyncio.Event) -> None:
    """Have ``ended`` set when the runner ends ``control``."""
    if control.is_closing():
        ended.set()
        return
    transport = control.transport
    inner = transport.get_protocol()
    # A stream's protocol is a plain one (a buffered one is fed otherwise and is left as it
    # is: runs then wait for a program's connection until their deadline, as they did).
    if isinstance(inner, asyncio.Protocol):
        transport.set_protocol(_EndWatch(inner, ended))


def hung_up(control: asyncio.StreamWriter) -> bool:
    """Whether the runner has ended ``control``, as the kernel says now: the loop hears of it
    only in a later turn. (Nothing is read: the runner sends nothing on it meanwhile.)"""
    if control.is_closing():
        return True
    sock = control.get_extra_info("socket")
    if sock is None:
        return True
    waiting = select.poll()
    waiting.register(sock.fileno(), getattr(select, "POLLRDHUP", 0))  # (and HUP, ERR: always)
    return bool(waiting.poll(0))


async def last_word(control: asyncio.StreamReader) -> str | None:
    """Why the runner ended ``control``, as its last frame there says (``exit``), or ``None``
    when it said nothing (it was killed) or anything else. Read only once the runner ended
    the connection: it sends nothing on it before then."""
    try:
        async with asyncio.timeout(_LAST_WORD_WAIT_S):
            frame = await read_frame(control, max_bytes=_LAST_WORD_MAX_BYTES)
    except (TimeoutError, FrameError, OSError):
        return None
    if frame is None or frame.get("type") != wire.EXIT:
        return None
    reason = frame.get("reason")
    return reason[: wire.MAX_EXIT_REASON_CHARS] if isinstance(reason, str) and reason else None
