"""The wire between guest programs and the host, and tool calls over it.

Guest programs call read tools through the sandbox's Unix socket; the host side
(:func:`serve_run`) admits each call through the registry as ``caller="code"`` with the run's
:class:`ToolSession`. :func:`render_api` is the typed API the model sees.
"""

from airlock.bridge._api import ParamStub, ToolStub, render_api, tool_stubs
from airlock.bridge._server import BridgeLimits, RunEnd, ToolSession, serve_run
from airlock.bridge._wire import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    PROTOCOL_VERSION,
    FrameError,
    decode_body,
    encode_frame,
    read_frame,
    read_sized_frame,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "PROTOCOL_VERSION",
    "BridgeLimits",
    "FrameError",
    "ParamStub",
    "RunEnd",
    "ToolSession",
    "ToolStub",
    "decode_body",
    "encode_frame",
    "read_frame",
    "read_sized_frame",
    "render_api",
    "serve_run",
    "tool_stubs",
]
