"""A harness process that makes calls until it is killed, reporting each call that returned.

Run as ``python -m tests.airlock.harness.audit_child`` with ``AIRLOCK_HOME`` set: it prints
``ready``, then one line per returned call (``call INVOICE`` for a direct read, ``program
HASH`` for a program), flushed at once, from eight concurrent workers.
"""

from __future__ import annotations

import asyncio
import sys

from airlock import Budget, Harness
from airlock.harness import EXECUTE_CODE
from airlock.sandbox.testing import ScriptedBackend, ok_result
from airlock.tools import AuditLog, program_hash
from tests.airlock.session_world import ALICE, policy
from tests.tools.billing import Handled, build_registry


def report(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main() -> None:
    tools = build_registry(Handled())
    tools.audit = AuditLog()  # the default: the harness opens audit.db under AIRLOCK_HOME
    harness = Harness(
        tools,
        policy(),
        ScriptedBackend(lambda program, profile: ok_result(1)),
        budget=Budget(calls=100_000),  # no call refused for the budget: each names its invoice
    )
    session = harness.session(ALICE)

    async def worker(w: int) -> None:
        n = 0
        while True:
            n += 1
            if n % 5 == 0:
                program = f"# worker {w}, call {n}\n1\n"
                await session.call(EXECUTE_CODE, {"code": program})
                report(f"program {program_hash(program)}")
            else:
                invoice = f"inv_{w}x{n}"
                await session.call("billing_invoice_get", {"invoice_id": invoice})
                report(f"call {invoice}")

    report("ready")
    await asyncio.gather(*(worker(w) for w in range(8)))


if __name__ == "__main__":
    asyncio.run(main())
