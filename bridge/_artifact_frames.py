"""``artifact`` frames: the files a program left, sent after it ends, checked and handed to the
run's :class:`ArtifactSink` on a worker thread.

A frame's size, its keys (exactly those of ``airlock_wire.ARTIFACT``), the file's name
(``airlock_wire.ARTIFACT_NAME``) and the piece's size are checked first. The files' bytes are
bounded by the sink's limits (bytes and files) rather than by ``max_bytes_in``, and every piece
but a file's last must be full, so their number is bounded too; the rest of each frame counts
against ``max_bytes_in`` as any frame does (:func:`artifact_bytes_in`). Frames once carried
any other key, up to the call frame limit each, past both budgets.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from typing import Any, Final

from airlock.bridge import airlock_wire as wire
from airlock.bridge._run_stop import limit_stop, protocol_stop
from airlock.bridge._session import ArtifactRefused, ArtifactSink

__all__ = ["MAX_ARTIFACT_FRAME_BYTES", "artifact_bytes_in", "store_artifact"]

_ARTIFACT_NAME: Final = re.compile(wire.ARTIFACT_NAME)
_KEYS: Final = frozenset({"type", "name", "offset", "data", "end"})
_MAX_DATA_CHARS: Final = 4 * -(-wire.ARTIFACT_CHUNK_BYTES // 3)
"""Base64 of one full piece."""
MAX_ARTIFACT_FRAME_BYTES: Final = _MAX_DATA_CHARS + 4096
"""An ``artifact`` frame on the wire: one piece in base64, and room for the longest name
(1,031 characters), the keys and the offset."""


def artifact_bytes_in(frame: dict[str, Any], size: int) -> int:
    """What an ``artifact`` frame of ``size`` bytes counts against ``max_bytes_in``: all but
    its piece's base64.

    Raises:
        RunStop: the frame is over :data:`MAX_ARTIFACT_FRAME_BYTES`, or has keys an artifact
            frame has not.
    """
    if size > MAX_ARTIFACT_FRAME_BYTES:
        raise protocol_stop(
            f"an 'artifact' frame of {size} bytes is over the {MAX_ARTIFACT_FRAME_BYTES}-byte "
            "limit of one piece"
        )
    if frame.keys() - _KEYS:
        unknown = sorted(k[:40] for k in frame.keys() - _KEYS)[:5]
        raise protocol_stop(f"an 'artifact' frame has unknown keys {unknown!r}")
    data = frame.get("data")
    return size - len(data) if isinstance(data, str) else size


async def store_artifact(frame: dict[str, Any], *, sink: ArtifactSink | None) -> None:
    """Check one ``artifact`` frame (its size and keys checked by :func:`artifact_bytes_in`)
    and hand its piece to ``sink``.

    Raises:
        RunStop: the frame breaks the protocol, or the sink's limits.
    """
    if sink is None:
        raise protocol_stop("this run collects no artifacts")
    name, offset, data, end = (frame.get(k) for k in ("name", "offset", "data", "end"))
    if not isinstance(name, str) or not _ARTIFACT_NAME.fullmatch(name):
        shown = repr(name[:80]) if isinstance(name, str) else type(name).__name__
        raise protocol_stop(f"artifact name {shown} is not a safe relative path")
    if type(offset) is not int or offset < 0 or type(end) is not bool:
        raise protocol_stop("an artifact's 'offset' must be a count of bytes and 'end' a bool")
    if not isinstance(data, str) or len(data) > _MAX_DATA_CHARS:
        raise protocol_stop("an artifact's 'data' must be base64 of one piece")

    def store() -> None:
        try:
            piece = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ArtifactRefused("an artifact's 'data' is not base64", limit=False) from None
        if len(piece) > wire.ARTIFACT_CHUNK_BYTES or (
            not end and len(piece) != wire.ARTIFACT_CHUNK_BYTES
        ):
            raise ArtifactRefused(
                f"a piece of {len(piece)} bytes: every piece but the last must hold "
                f"{wire.ARTIFACT_CHUNK_BYTES}",
                limit=False,
            )
        sink.receive(name, offset, piece, end=end)

    try:
        await asyncio.to_thread(store)
    except ArtifactRefused as exc:
        if exc.limit:
            raise limit_stop("artifacts", exc.message) from None
        raise protocol_stop(exc.message) from None
