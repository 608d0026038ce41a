"""The data demo (``make demo`` runs it after the billing story): a 50 MB sales export given
to a program as a read-only input, per-region totals computed with pandas in the data image,
a chart and a table returned as artifacts, and the totals checked against the same sums done
on the host. Run it from the repository's root::

    .venv/bin/python -m examples.data.demo [--size-mb 50]

``--size-mb`` is at least 0.001 and at most 1000 (below the data image's 1 GiB input
limit). It writes the export under ``$AIRLOCK_HOME/demo/data/RUN/`` and the program's
artifacts under ``$AIRLOCK_HOME/artifacts/``. Exit codes: 0 done; 1 a check failed; 2 a
size out of range, or the session was refused (its code is printed); 3 the sandbox (the
Docker engine or the data image) is unavailable.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, Final

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table

from airlock.cli import Settings
from airlock.harness import Harness
from airlock.policies import Principal, UsageError, load_policy
from airlock.sandbox import DockerBackend, InputRefused, SandboxError
from airlock.tools import Registry, SQLiteAuditStore
from examples.data import DEMO_POLICY, PROGRAM, RegionTotal, host_totals, write_sales

__all__ = ["DemoFailed", "demo", "main"]

ANALYST = Principal(user_id="analyst", tenant_id="acme")
GUEST = Principal(user_id="guest", tenant_id="acme")
MIN_SIZE_MB: Final = 0.001
"""Smallest export: a smaller one would hold the header and no order."""
MAX_SIZE_MB: Final = 1000.0
"""Largest export: it stays below the data image's 1 GiB input limit with its last rows."""


class DemoFailed(Exception):
    """A check of the demo did not hold."""


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise DemoFailed(what)


def _program_totals(value: dict[str, Any]) -> dict[str, RegionTotal]:
    return {
        region: RegionTotal(row["orders"], row["units"], row["amount_cents"])
        for region, row in sorted(value["regions"].items())
    }


def _csv_totals(path: Path) -> dict[str, RegionTotal]:
    rows = csv.DictReader(io.StringIO(path.read_text()))
    return {
        row["region"]: RegionTotal(int(row["orders"]), int(row["units"]), int(row["amount_cents"]))
        for row in sorted(rows, key=lambda r: r["region"])
    }


async def run_demo(console: Console, *, size_bytes: int) -> dict[str, Any]:
    """The demo's steps, printed as they happen; what it measured."""
    settings = Settings.from_env()
    run = "data_" + uuid.uuid4().hex[:12]
    home = settings.home / "demo" / "data" / run
    home.mkdir(parents=True, exist_ok=True)
    sales = home / "sales.csv"
    timings: dict[str, float] = {}

    began = time.perf_counter()
    orders = write_sales(sales, size_bytes=size_bytes)
    timings["write the export"] = time.perf_counter() - began
    began = time.perf_counter()
    expected = host_totals(sales)
    timings["totals on the host (csv module)"] = time.perf_counter() - began
    size = sales.stat().st_size
    console.print(
        Panel(
            f"{sales} ({size / 1e6:.1f} MB, {orders:,} orders), given to the session as the "
            "input sales.csv: mounted read-only at /data/sales.csv. The policy grants "
            "read(file:sales.csv) to analyst only.",
            title="1. the input",
            title_align="left",
            border_style="yellow",
        )
    )
    policy = load_policy(DEMO_POLICY)
    async with DockerBackend(
        image=settings.image, data_image=settings.data_image, profile=policy.sandbox
    ) as backend:
        harness = Harness(
            Registry(),
            policy,
            backend,
            audit=SQLiteAuditStore(home / "audit.db"),
            artifacts=settings.artifacts,
        )
        try:
            harness.session(GUEST, inputs={"sales.csv": sales})
            _check(False, "a principal without read(file:sales.csv) was given the input")
        except InputRefused as exc:
            console.print(f"[dim]guest, without the grant: refused ({exc.reason}): {exc}[/]")
        session = harness.session(ANALYST, inputs={"sales.csv": sales})
        console.print(
            Panel(
                Syntax(PROGRAM, "python", word_wrap=True),
                title="2. model → execute_code (data image)",
                title_align="left",
            )
        )
        began = time.perf_counter()
        result = await session.call("execute_code", {"code": PROGRAM})
        timings["the program, container start included"] = time.perf_counter() - began
    context = len(result.content.encode())
    console.print(
        Panel(
            result.content,
            title=f"result → model ({context:,} bytes)",
            title_align="left",
            border_style="red" if result.is_error else "green",
        )
    )
    _check(not result.is_error, f"the program failed: {result.content[:500]}")
    body = json.loads(result.content)
    got = _program_totals(body["value"])
    _check(got == expected, f"the totals differ: program {got}, host {expected}")
    refs = {ref.name: ref for ref in result.artifacts}
    _check(
        sorted(refs) == ["region_totals.csv", "region_totals.png"],
        f"artifacts {sorted(refs)}",
    )
    _check(_csv_totals(Path(refs["region_totals.csv"].path)) == expected, "the CSV's totals")
    chart = Path(refs["region_totals.png"].path).read_bytes()
    _check(chart.startswith(b"\x89PNG\r\n\x1a\n"), "the chart is not a PNG")
    _check(b"\x89PNG" not in result.content.encode(), "the chart entered the model's context")
    table = Table("region", "orders", "units", "amount (USD)", "host agrees")
    for region, total in expected.items():
        table.add_row(
            region,
            f"{total.orders:,}",
            f"{total.units:,}",
            f"{total.amount_cents / 100:,.2f}",
            "yes" if got.get(region) == total else "NO",
        )
    console.print(table)
    artifacts = Table("artifact", "bytes", "media type", "sha256")
    for ref in result.artifacts:
        artifacts.add_row(ref.name, f"{ref.size_bytes:,}", ref.media_type, ref.sha256[:16])
    console.print(artifacts)
    for ref in result.artifacts:
        console.print(f"{ref.name}: {ref.path}", highlight=False, soft_wrap=True)
    program_run = Path(result.artifacts[0].path).parent.name
    console.print(
        f"The {size / 1e6:.1f} MB input never entered the model's context: {context:,} bytes "
        f"did (the totals and the artifacts' references). "
        f"`airlock artifacts list {program_run}` lists the files again.",
        soft_wrap=True,
    )
    for step, seconds in timings.items():
        console.print(f"[dim]{step}: {seconds:.2f} s[/]")
    return {"context_bytes": context, "input_bytes": size, "artifacts": sorted(refs), **timings}


def demo(
    size_mb: Annotated[
        float,
        typer.Option(
            help=f"Size of the generated export, in MB ({MIN_SIZE_MB:g} to {MAX_SIZE_MB:g})."
        ),
    ] = 50.0,
) -> None:
    """Per-region totals of a generated sales export, in the data image, checked on the
    host; a chart and a table come back as artifacts."""
    console = Console()
    errors = Console(stderr=True, soft_wrap=True)
    # Written as a range so that nan, which compares false with anything, is refused too.
    if not MIN_SIZE_MB <= size_mb <= MAX_SIZE_MB:
        errors.print(
            f"[red]--size-mb {size_mb:g} is no size of an export:[/] give {MIN_SIZE_MB:g} to "
            f"{MAX_SIZE_MB:g} MB"
        )
        raise typer.Exit(2)
    began = time.perf_counter()
    try:
        asyncio.run(run_demo(console, size_bytes=int(size_mb * 1e6)))
    except SandboxError as exc:
        errors.print(f"[red]sandbox unavailable ({exc.code}):[/] {escape(str(exc))}")
        raise typer.Exit(3) from None
    except UsageError as exc:
        # InputRefused among them (a session not given its input): a use to change, not a
        # check that failed.
        errors.print(f"[red]the data demo was refused ({exc.code}):[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    except DemoFailed as exc:
        errors.print(f"[red]the data demo went wrong:[/] {escape(str(exc))}")
        raise typer.Exit(1) from None
    console.print(f"[green]data demo done in {time.perf_counter() - began:.1f} s[/]")


def main() -> None:
    """Entry point of ``python -m examples.data.demo``."""
    typer.run(demo)


if __name__ == "__main__":
    main()
