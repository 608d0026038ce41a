"""``audit effects RUN``: what one run exercised, tool by tool, against the inventory. A
program's own record counts by the input files it read (``read(file:NAME)``), in a row of
its own (``execute_code``), checked against the grant."""

from __future__ import annotations

from typing import Any

import pytest

from airlock.harness import EXECUTE_CODE
from airlock.inventory import PolicyDocument, SubjectInventory, run_effects, subject_inventory
from airlock.policies import parse_policy
from airlock.tools import AuditEvent
from tests.airlock.inventory_registry import POLICY, POLICY_ARG, registry
from tests.audit_events import stored_event

GET = "billing_invoice_get"
INPUT = "read(file:salaries.csv)"
_ALICE = '[principals.alice]\ntenant = "acme"\n'


def _alice(*, files: bool) -> SubjectInventory:
    text = POLICY.read_text()
    if files:
        text = text.replace(_ALICE, _ALICE + 'effects = ["read(file:*)"]\n')
    [subject] = PolicyDocument(parse_policy(text, source=POLICY_ARG)).select(principals=["alice"])
    return subject_inventory(registry, subject)


def _program(*effects: str, **fields: Any) -> AuditEvent:
    return stored_event(
        tool=EXECUTE_CODE, call_id="c0", rule=EXECUTE_CODE, effects=effects, **fields
    )


_CALL = stored_event(caller="code", call_id="c0:1")
Row = tuple[str, tuple[str, ...], int, tuple[str, ...], tuple[str, ...]]

# name: (events, whether alice's grant covers every file, the rows: tool, callers, calls,
# effects exercised, outside the inventory)
RUNS: dict[str, tuple[tuple[AuditEvent, ...], bool, list[Row]]] = {
    "a program that read an input and called a tool": (
        (_program(INPUT), _CALL),
        True,
        [
            (GET, ("code",), 1, ("read(billing:invoice/inv_1)",), ()),
            (EXECUTE_CODE, ("direct",), 1, (INPUT,), ()),
        ],
    ),
    "a program's input the grant no longer covers": (
        (_program(INPUT),),
        False,
        [(EXECUTE_CODE, ("direct",), 1, (INPUT,), (INPUT,))],
    ),
    "a program given no input": (
        (_program(), _CALL),
        True,
        [(GET, ("code",), 1, _CALL.effects, ())],
    ),
    "a program refused its input": (
        (_program(INPUT, stage="authorize", decision="deny", outcome="error", code="denied"),),
        True,
        [],
    ),
    "a program that failed after reading its input": (
        (_program(INPUT, outcome="error", code="timeout"),),
        True,
        [(EXECUTE_CODE, ("direct",), 1, (INPUT,), ())],
    ),
}


@pytest.mark.parametrize("case", sorted(RUNS))
def test_a_run_lists_what_it_exercised(case: str) -> None:
    events, files, expected = RUNS[case]
    found = run_effects(events, _alice(files=files))
    rows = [(f.tool, f.callers, f.calls, f.effects, f.outside) for f in found]
    assert sorted(rows) == sorted(expected)
