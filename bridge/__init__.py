"""The wire between guest programs and the host, and tool calls over it.

Guest programs call read tools through the sandbox's Unix socket; the host side
(:func:`serve_run`) admits each call through the registry as ``caller="code"`` with the run's
:class:`ToolSession`. :func:`render_api` is the typed API the model sees.
:mod:`airlock.bridge.airlock_wire` is the contract the guest shares with the host (frame
types, protocol version, error shapes); it is shipped into the sandbox image as it is.
"""

from airlock.bridge._api import ParamStub, ToolStub, proposal_stubs, tool_stubs
from airlock.bridge._api_source import render_api
from airlock.bridge._codec import (
    MAX_DEPTH,
    MAX_ELEMENTS,
    MAX_INT_DIGITS,
    FrameError,
    count_elements,
    decode_body,
    encode_frame,
    read_frame,
    read_sized_frame,
)
from airlock.bridge._program_errors import program_error
from airlock.bridge._server import serve_run
from airlock.bridge._session import (
    ArtifactRefused,
    ArtifactSink,
    BridgeLimits,
    RunEnd,
    ToolSession,
)
from airlock.bridge.airlock_wire import NAMESPACE_MEMBERS, PROTOCOL_VERSION

__all__ = [
    "MAX_DEPTH",
    "MAX_ELEMENTS",
    "MAX_INT_DIGITS",
    "NAMESPACE_MEMBERS",
    "PROTOCOL_VERSION",
    "ArtifactRefused",
    "ArtifactSink",
    "BridgeLimits",
    "FrameError",
    "ParamStub",
    "RunEnd",
    "ToolSession",
    "ToolStub",
    "count_elements",
    "decode_body",
    "encode_frame",
    "program_error",
    "proposal_stubs",
    "read_frame",
    "read_sized_frame",
    "render_api",
    "serve_run",
    "tool_stubs",
]
