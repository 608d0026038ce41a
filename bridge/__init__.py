"""The wire between guest programs and the host: frames, and (later) tool calls over them."""

from bridge._wire import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    PROTOCOL_VERSION,
    FrameError,
    decode_body,
    encode_frame,
    read_frame,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "PROTOCOL_VERSION",
    "FrameError",
    "decode_body",
    "encode_frame",
    "read_frame",
]
