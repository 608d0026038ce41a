"""``artifact`` frames: the files a program left, sent after it ends, checked and handed to the
run's :class:`ArtifactSink` on a worker thread.

A frame's shape, the file's name (``airlock_wire.ARTIFACT_NAME``) and the piece's size are
checked first. Artifacts are bounded by the sink's limits (bytes and files) rather than by
``max_bytes_in``, and every piece but a file's last must be full, so their number is bounded
too.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from typing import Any, Final

from airlock.bridge import airlock_wire as wire
from airlock.bridge._run_stop import limit_stop, protocol_stop
from airlock.bridge._session import ArtifactRefused, ArtifactSink, BridgeLimits

__all__ = ["store_artifact"]

_ARTIFACT_NAME: Final = re.compile(wire.ARTIFACT_NAME)


async def store_artifact(
    frame: dict[str, Any], size: int, *, sink: ArtifactSink | None, limits: BridgeLimits
) -> None:
    """Check one ``artifact`` frame of ``size`` bytes and hand its piece to ``sink``.

    Raises:
        RunStop: the frame breaks the protocol, or the sink's limits.
    """
    if sink is None:
        raise protocol_stop("this run collects no artifacts")
    if size > limits.max_call_frame_bytes:
        raise protocol_stop(f"an 'artifact' frame of {size} bytes is over the frame limit")
    name, offset, data, end = (frame.get(k) for k in ("name", "offset", "data", "end"))
    if not isinstance(name, str) or not _ARTIFACT_NAME.fullmatch(name):
        shown = repr(name[:80]) if isinstance(name, str) else type(name).__name__
        raise protocol_stop(f"artifact name {shown} is not a safe relative path")
    if type(offset) is not int or offset < 0 or type(end) is not bool:
        raise protocol_stop("an artifact's 'offset' must be a count of bytes and 'end' a bool")
    if not isinstance(data, str) or len(data) > 4 * (wire.ARTIFACT_CHUNK_BYTES // 3 + 1):
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
