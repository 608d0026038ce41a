from __future__ import annotations

from airlock import bridge
from tests.public_api import assert_public_api

# The public API, changed only on purpose: a name added or removed fails this test.
PUBLIC_API = [
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


def test_public_api_is_pinned() -> None:
    assert_public_api(bridge, PUBLIC_API)
