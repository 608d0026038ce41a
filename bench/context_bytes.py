"""Bytes that enter the model's context: one execute_code program versus direct calls.

Run: ``.venv/bin/python bench/context_bytes.py``. The task is the bulk-read fixture
(``tests/airlock/fixtures/conversations/bulk_read.json``): 200 invoices, find the ones paid
twice. Two recorded conversations run against a real session (Docker sandbox, SQLite
ledger), answered in the Anthropic Messages format:

* ``execute_code``: one program lists and reads every invoice inside the sandbox and returns
  only the duplicate pairs;
* ``direct calls``: the model lists the invoices, then reads each one with a direct call in
  one turn, so every invoice comes back into its context.

Counted: the tool results (what the harness sends back), and the model's own tool calls
(the program text, or 201 tool_use blocks), which stay in the context too.

Goal (issue 6): >= 90% fewer bytes through execute_code.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airlock import Budget, Harness, Session
from airlock.frontends import ContextBytes, ReplayModel, Transcript
from airlock.policies import load_policy
from airlock.sandbox import DEFAULT_IMAGE, DockerBackend
from airlock.tools import SQLiteLedgerStore
from airlock.tools.testing import SystemOfRecord
from tests.airlock.conversation_registry import ALICE, INVOICE_COUNT, build_registry

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "airlock" / "fixtures" / "conversations" / "bulk_read.json"
POLICY = ROOT / "tests" / "airlock" / "conversation_policy.toml"
# Direct calls must not be cut short by the session's default budget.
BUDGET = Budget(calls=1_000, bytes=50_000_000)


def direct_replay() -> ReplayModel:
    """The same task with direct calls: list, then every invoice in one turn."""
    reads = [
        {
            "type": "tool_use",
            "id": f"toolu_get_{n:03d}",
            "name": "billing_invoice_get",
            "input": {"invoice_id": f"inv_{n:03d}"},
        }
        for n in range(INVOICE_COUNT)
    ]
    listing = {
        "type": "tool_use",
        "id": "toolu_list",
        "name": "billing_invoice_list",
        "input": {"limit": 500},
    }
    return ReplayModel.model_validate({"turns": [{"content": [listing]}, {"content": reads}]})


def _errors(transcript: Transcript) -> list[Any]:
    return [b["content"] for b in transcript.results() if b.get("is_error")]


async def measure(session: Session) -> tuple[ContextBytes, ContextBytes, Any]:
    """Play both conversations; returns both measurements and the program's answer."""
    measured = []
    answer: Any = None
    for case, replay in (
        ("execute_code", ReplayModel.load(FIXTURE)),
        ("direct calls", direct_replay()),
    ):
        transcript = await replay.play(session)
        if errors := _errors(transcript):
            raise RuntimeError(f"{case}: a call failed: {errors[0]}")
        if case == "execute_code":
            answer = json.loads(next(transcript.results())["content"])["value"]
        measured.append(transcript.context())
    return measured[0], measured[1], answer


def reduction(code: int, direct: int) -> float:
    """Percent fewer bytes through code than through direct calls."""
    return 100.0 * (1 - code / direct)


def print_figure(code: ContextBytes, direct: ContextBytes) -> None:
    """A table in the style of the other benchmarks, and the reduction."""
    print(f"\nbytes into the model's context: {INVOICE_COUNT} invoices, find the duplicates")
    print(f"{'case':<38}{'calls':>6}{'result bytes':>16}{'call bytes':>14}{'total':>10}")
    for case, row in (("execute_code", code), ("direct calls", direct)):
        print(
            f"{case:<38}{row.calls:>6}{row.result_bytes:>16,}{row.call_bytes:>14,}{row.total:>10,}"
        )
    print(
        f"reduction through execute_code: {reduction(code.result_bytes, direct.result_bytes):.1f}%"
        f" of result bytes, {reduction(code.total, direct.total):.1f}% of all bytes"
        " (goal >= 90%)"
    )


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        system = SystemOfRecord(Path(tmp) / "system.db")
        ledger = SQLiteLedgerStore(Path(tmp) / "ledger.db")
        image = os.environ.get("AIRLOCK_IMAGE", DEFAULT_IMAGE)
        try:
            async with DockerBackend(image=image, pool_size=1) as backend:
                harness = Harness(
                    build_registry(system), load_policy(POLICY), backend, ledger, budget=BUDGET
                )
                code, direct, answer = await measure(harness.session(ALICE))
        finally:
            ledger.close()
            system.close()
    print_figure(code, direct)
    print(f"duplicates found by the program: {answer['duplicates']}")


if __name__ == "__main__":
    asyncio.run(main())
