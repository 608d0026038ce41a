"""The runtime checks of declarations, from sandboxed programs: a program calls tools whose
code reaches what they do not declare, and the host checks each answer, the audit records,
and that nothing undeclared crossed (``tests/tools/reach_world.py`` holds the table)."""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

import pytest

from airlock.bridge import ToolSession
from airlock.tools import AuditLog, MemoryAuditStore, Registry
from tests.conftest import Sandbox
from tests.tools.reach_world import (
    ALICE,
    GRANT,
    ROWS,
    STOLEN,
    build_registry,
    tool_name,
    world,
)

pytestmark = pytest.mark.docker

PROGRAM = """
out = []
for tool, args in CALLS:
    try:
        getattr(tools, tool)(**args)
        out.append("ok")
    except tools.ToolError as exc:
        out.append([exc.code, exc.message])
out
"""


def test_a_program_reaches_only_what_its_tools_declare(sandbox: Sandbox, tmp_path: Path) -> None:
    with world(tmp_path) as here:
        registry = build_registry(here, Registry(audit=AuditLog(MemoryAuditStore())))
        tools = ToolSession(registry=registry, principal=ALICE, grant=GRANT)
        calls = [(tool_name(row, mode), row.args) for row in ROWS for mode in ("sync", "async")]
        program = f"CALLS = {json.dumps(calls)}\n" + textwrap.dedent(PROGRAM)

        result = sandbox.run(program, tools=tools)

        assert result.ok, result.error
        keys = [f"{tool}:{args['target']}" for tool, args in calls]
        answers = dict(zip(keys, result.value, strict=True))  # type: ignore[call-overload]
        events = registry.audit.events(run_id=tools.run_id)
        for row in ROWS:
            for mode in ("sync", "async"):
                name = tool_name(row, mode)
                answer = answers[f"{name}:{row.args['target']}"]
                event = [e for e in events if e.tool == name and e.final and e.caller == "code"]
                if row.code is None:
                    assert answer == "ok", (name, answer)
                    assert any(e.outcome == "ok" for e in event)
                    continue
                code, message = answer
                assert code == row.code, (name, answer)
                assert row.shows(here) in message
                refused = [e for e in event if e.rule == row.rule]
                assert refused, (name, [(e.rule, e.code) for e in event])
                assert all((e.decision, e.code) == ("deny", "denied") for e in refused)
                assert all(row.shows(here) in (e.detail or "") for e in refused)
        # Judged from the host: nothing undeclared crossed, and the declared listener saw
        # exactly the four declared connections (by address and by name, sync and async).
        for _ in range(200):
            if here.declared.accepted >= 4:
                break
            time.sleep(0.01)
        assert here.declared.accepted == 4
        assert here.undeclared.accepted == 0
        assert here.unix_connections() == 0
        assert not here.leaked_file.exists()
        assert not here.spawned_marker.exists()
        assert "AIRLOCK_TEST_SET_BY_A_TOOL" not in os.environ
        assert os.environ[STOLEN] not in repr(events)
