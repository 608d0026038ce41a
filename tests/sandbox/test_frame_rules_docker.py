"""A well-behaved program's value or tool arguments that the host's frame rules refuse, in a
real container: the guest refuses them first, typed, and the run goes on (it ended as a
``protocol_error``, telling the model it broke the bridge protocol)."""

from __future__ import annotations

import pytest

from airlock.bridge import BridgeLimits, ToolSession
from airlock.tools import AuditLog, MemoryAuditStore
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.conftest import Sandbox

pytestmark = pytest.mark.docker

CAUGHT = (
    "try:\n    tools.records_item_get(record_id={arg})\n"
    "except tools.ToolError as e:\n    print('typed', e.code)\n'went on'\n"
)
# (case, program, the session's call frame limit, status, error type, stdout)
PROGRAMS = [
    ("value_2**128", "2**128\n", None, "error", "InvalidResult", ""),
    ("value_70_deep", "v = 1\nfor _ in range(70):\n    v = [v]\nv\n", None, "error",
     "InvalidResult", ""),
    # 63 and 64 levels (the done frame's two around them: 65, 66) ended as protocol_error.
    ("value_62_deep", "v = 'went on'\nfor _ in range(62):\n    v = [v]\nv\n", None, "ok", None,
     ""),
    ("value_63_deep", "v = 1\nfor _ in range(63):\n    v = [v]\nv\n", None, "error",
     "InvalidResult", ""),
    ("value_64_deep_in_result", "v = 1\nfor _ in range(64):\n    v = [v]\nresult(v)\n", None,
     "error", "InvalidResult", ""),
    ("arg_10**31", CAUGHT.format(arg="10**31"), None, "ok", None, "typed invalid_input\n"),
    ("arg_1.1MB_string", CAUGHT.format(arg="'x' * 1_100_000"), None, "ok", None,
     "typed invalid_input\n"),
    # The run frame carries the session's own limit.
    ("arg_over_the_sessions_limit", CAUGHT.format(arg="'x' * 20_000"), 10_000, "ok", None,
     "typed invalid_input\n"),
    ("arg_within_the_sessions_limit", CAUGHT.format(arg="'rec_1'"), 10_000, "ok", None, ""),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "program", "call_bytes", "status", "error_type", "stdout"),
    PROGRAMS,
    ids=[row[0] for row in PROGRAMS],
)
def test_the_guest_refuses_what_the_host_would(
    sandbox: Sandbox,
    case: str,
    program: str,
    call_bytes: int | None,
    status: str,
    error_type: str | None,
    stdout: str,
) -> None:
    limits = BridgeLimits(max_call_frame_bytes=call_bytes) if call_bytes else BridgeLimits()
    tools = ToolSession(
        registry=build_registry(audit=AuditLog(MemoryAuditStore()), slow_s=0.0),
        principal=ALICE,
        grant=GRANT,
        limits=limits,
    )
    result = sandbox.run(program, tools=tools)
    assert result.status == status, (case, result.error)
    assert (result.error.type if result.error else None) == error_type, case
    assert result.stdout == stdout, case
    if status == "ok":
        value, levels = result.value, 0
        while isinstance(value, list):  # the deep value came back whole
            value, levels = value[0], levels + 1
        assert (value, levels) == ("went on", 62 if case == "value_62_deep" else 0)
