"""`airlock demo`: the main job, end to end on this machine."""

from __future__ import annotations

import asyncio
import json

import typer
from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax

from airlock._settings import Settings
from sandbox import DockerBackend, RunResult, SandboxError

__all__ = ["demo"]

# A model-written program: it crunches data inside the sandbox and returns only a summary.
DEMO_PROGRAM = """\
import statistics
from collections import Counter

invoices = [
    {"id": f"in_{n:04d}", "tenant": "acme", "amount": 1000 + (n * 37) % 900,
     "payments": 2 if n % 41 == 0 else 1}
    for n in range(500)
]
duplicates = [i["id"] for i in invoices if i["payments"] > 1]
print(f"scanned {len(invoices)} invoices")
{
    "invoices": len(invoices),
    "duplicate_payments": duplicates,
    "median_amount": statistics.median(i["amount"] for i in invoices),
    "by_payments": dict(Counter(i["payments"] for i in invoices)),
}
"""

ESCAPE_PROGRAM = """\
import socket
socket.create_connection(("1.1.1.1", 443), timeout=2)
"""


def demo() -> None:
    """Run an example program, then an escape attempt, in the hardened sandbox."""
    console = Console()
    settings = Settings.from_env()

    async def go() -> tuple[RunResult, RunResult, RunResult, RunResult]:
        async with DockerBackend(image=settings.image, pool_size=1) as backend:
            first = await backend.run(DEMO_PROGRAM)
            await backend.pool.wait_ready(1)
            warm = await backend.run(DEMO_PROGRAM)
            escape = await backend.run(ESCAPE_PROGRAM)
            # Without the language guard the container itself is the boundary.
            unguarded = await backend.run(
                ESCAPE_PROGRAM, profile=backend.profile.model_copy(update={"language_mode": "full"})
            )
            return first, warm, escape, unguarded

    console.print(Panel(Syntax(DEMO_PROGRAM, "python"), title="model-written program"))
    try:
        first, warm, escape, unguarded = asyncio.run(go())
    except SandboxError as exc:
        console.print(f"[red]sandbox unavailable ({exc.code}):[/] {exc}")
        raise typer.Exit(3) from None
    console.print(f"stdout: {first.stdout.strip()}")
    console.print("final value (all that returns to the model):")
    console.print_json(json.dumps(first.value))
    console.print(
        f"cold run {first.duration_s * 1000:.0f} ms, warm pooled run "
        f"{warm.duration_s * 1000:.1f} ms"
    )
    console.print(Panel(Syntax(ESCAPE_PROGRAM, "python"), title="an escape attempt"))
    console.print(f"restricted mode: [bold]{escape.reason()}[/]")
    console.print(f"full mode, the container alone: [bold]{unguarded.reason()}[/]")
    if not (
        first.ok
        and warm.ok
        and escape.status == "invalid_program"
        and unguarded.error is not None
        and unguarded.error.type == "OSError"
    ):
        raise typer.Exit(1)
