"""A warm program as a model's ``execute_code`` call through a harness session, against the same
program run by the sandbox directly (``DockerBackend.run`` with the same tools), in one run.

Run: ``.venv/bin/python bench/harness_warm.py [--runs N] [--busy N] [--audit sqlite|memory]``
(``--busy``: N processes spinning beside it, a loaded machine).

Both run a trivial program 20 ms after the previous result (as between a model's turns), each
in a reused container of its own, in alternating blocks so that drift on a shared machine falls
on both. Both offer the billing demo's tools (two of them callable from code) to the same
principal. What the harness adds is what a call of the model costs on top of the run itself:
its arguments checked, the program's text and record in the audit log, the session's budget
and accounting, a directory for the program's artifacts, and, before the answer is given,
waiting for the session's records to be stored (with the SQLite audit log, the default: one
synced commit a call; ``--audit memory`` leaves that out).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airlock.bridge import ToolSession
from airlock.harness import Budget, Harness
from airlock.inventory import load_policy_document
from airlock.policies import Principal, SandboxProfile
from airlock.sandbox import DEFAULT_IMAGE, DockerBackend
from airlock.tools import MemoryAuditStore, SQLiteAuditStore, SQLiteLedgerStore
from bench._args import at_least
from bench._busy import busy_processes
from bench._table import print_table
from examples.billing import DEMO_POLICY
from examples.billing.tools import demo_registry

PROGRAM = "rows = [1, 2, 3]\nlen(rows) + 1\n"
"""Answers 4 in either language mode (the harness's default is ``restricted``)."""
PAUSE_S = 0.02
BLOCK = 25
"""Runs of one case before the other takes its turn."""
WARM_UP = 10
ALICE = Principal(
    user_id="alice", tenant_id="acme", scopes=frozenset({"billing.read", "billing.write"})
)
IMAGE = os.environ.get("AIRLOCK_IMAGE", DEFAULT_IMAGE)
HARNESS = "execute_code through a harness session"
DIRECT = "DockerBackend.run, the same tools"


async def measure(runs: int, audit_store: str) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {HARNESS: [], DIRECT: []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ledger = SQLiteLedgerStore(root / "ledger.db")
        audit = MemoryAuditStore() if audit_store == "memory" else SQLiteAuditStore(root / "a.db")
        document = load_policy_document(DEMO_POLICY)
        profile = SandboxProfile()  # (the harness's: restricted mode)
        async with (
            DockerBackend(image=IMAGE, profile=profile, pool_size=1, reuse=True) as for_harness,
            DockerBackend(image=IMAGE, profile=profile, pool_size=1, reuse=True) as direct,
        ):
            harness = Harness(
                demo_registry(), document.policy, for_harness, ledger, audit=audit,
                artifacts=root / "artifacts",
            )  # fmt: skip
            session = harness.session(ALICE, budget=Budget(calls=runs + WARM_UP + 1))
            registry, grant = demo_registry(), document.policy.grant_for(ALICE)

            def tools() -> ToolSession:
                return ToolSession(registry=registry, principal=ALICE, grant=grant)

            async def through_harness() -> None:
                answer = await session.execute_code(PROGRAM)
                if answer.is_error or '"value":4' not in answer.content:
                    raise SystemExit(f"the harness's program failed: {answer.content}")

            async def directly() -> None:
                result = await direct.run(PROGRAM, tools=tools())
                if not result.ok or result.value != 4:
                    raise SystemExit(f"the direct run failed: {result!r}")

            cases = ((HARNESS, through_harness), (DIRECT, directly))
            for _, one in cases:
                for _ in range(WARM_UP):
                    await one()
            while len(samples[HARNESS]) < runs:
                for name, one in cases:
                    for _ in range(min(BLOCK, runs - len(samples[name]))):
                        await asyncio.sleep(PAUSE_S)
                        began = time.perf_counter()
                        await one()
                        samples[name].append((time.perf_counter() - began) * 1e3)
            await session.close()
        ledger.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=at_least(1), default=300)
    parser.add_argument("--busy", type=at_least(0), default=0)
    parser.add_argument("--audit", choices=("sqlite", "memory"), default="sqlite")
    args = parser.parse_args()
    print(
        f"image {IMAGE}; audit store {args.audit}; {args.busy} busy processes beside it; "
        f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    with busy_processes(args.busy):
        samples = asyncio.run(measure(args.runs, args.audit))
    print_table(
        f"a warm program, {PAUSE_S * 1e3:.0f} ms after the previous result (request -> answer)",
        [(DIRECT, samples[DIRECT], ""), (HARNESS, samples[HARNESS], DIRECT)],
        "ms",
    )


if __name__ == "__main__":
    main()
