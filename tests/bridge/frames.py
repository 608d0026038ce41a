"""Reading back what the host wrote: the frames in a byte string, in order."""

from __future__ import annotations

import json
import struct
from typing import Any


def decode_frames(data: bytes) -> list[dict[str, Any]]:
    """Every length-prefixed JSON frame in ``data`` (which holds whole frames only)."""
    out = []
    while data:
        (size,) = struct.unpack(">I", data[:4])
        out.append(json.loads(data[4 : 4 + size]))
        data = data[4 + size :]
    return out
