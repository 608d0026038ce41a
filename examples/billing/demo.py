"""The demo, the main job (``make demo``), end to end on this machine: see
:mod:`examples.billing.story`. Run it from the repository's root::

    .venv/bin/python -m examples.billing.demo

Exit codes: 0 done; 1 a step went differently than the story says; 3 the sandbox (the
Docker engine or the image) is unavailable.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table

from airlock.cli import Settings
from airlock.harness import ModelResult
from airlock.policies import AirlockError
from airlock.sandbox import SandboxError
from airlock.tools import format_amount
from examples.billing import DEMO_POLICY
from examples.billing.story import DemoError, DemoReport, run_story

__all__ = ["demo", "main"]

_RESULT_CHARS = 600  # long tool results are shortened on screen, never in the context
_ATTEMPT = {"committed": "receipt", "unknown": "answer lost"}


class RichNarrator:
    """Prints the conversation and each step as it happens."""

    def __init__(self, console: Console) -> None:
        self.console = console

    @property
    def columns(self) -> int:
        return self.console.width - 4  # (a panel's borders and padding)

    def message(self, message: dict[str, Any]) -> None:
        content = message["content"]
        if isinstance(content, str):
            self.console.print(Panel(content, title="user", title_align="left"))
            return
        for block in content:
            kind = block.get("type")
            if kind == "text":
                self.console.print(f"[bold cyan]model:[/] {block['text']}")
            elif kind == "tool_use" and block["name"] == "execute_code":
                code = Syntax(block["input"]["code"], "python", word_wrap=True)
                self.console.print(Panel(code, title="model → execute_code", title_align="left"))
            elif kind == "tool_use":
                args = json.dumps(block["input"])
                self.console.print(f"[bold cyan]model → {block['name']}[/] {args}")
            elif kind == "tool_result":
                self._result(block)

    def _result(self, block: dict[str, Any]) -> None:
        text = str(block.get("content", ""))
        shown = text if len(text) <= _RESULT_CHARS else text[:_RESULT_CHARS] + " …"
        style = "red" if block.get("is_error") else "green"
        self.console.print(
            Panel(
                shown,
                title=f"result → model ({len(text.encode()):,} bytes)",
                title_align="left",
                border_style=style,
            )
        )

    def step(self, title: str, text: str) -> None:
        self.console.print(Panel(text, title=title, title_align="left", border_style="yellow"))

    def attempt(self, label: str, result: ModelResult) -> None:
        body = json.loads(result.content)
        if result.is_error:
            said = f"[red]{result.code}[/]: {body.get('message', '')}"
        else:  # a batch: how many items stand where
            counts = ", ".join(f"{n} {state}" for state, n in body["counts"].items())
            said = f"[green]{body['status']}[/]: {counts}"
        self.console.print(f"  [bold]{label}[/] → {said}")


def demo() -> None:
    """Find duplicate payments with one sandboxed program that proposes their refunds; one
    approval of the batch commits them."""
    console = Console()
    settings = Settings.from_env()
    console.rule("airlock demo: duplicate payments, found by code, refunded with approval")
    try:
        report = run_story(settings.home, image=settings.image, narrator=RichNarrator(console))
    except SandboxError as exc:
        console.print(f"[red]sandbox unavailable ({exc.code}):[/] {exc}")
        raise typer.Exit(3) from None
    except (DemoError, AirlockError) as exc:
        console.print(f"[red]the demo failed ({exc.code}):[/] {exc}")
        raise typer.Exit(1) from None
    _summary(console, report)


def _summary(console: Console, report: DemoReport) -> None:
    console.rule("what happened")
    code, direct = report.code_path, report.direct_path
    context = Table(title="bytes into the model's context to find the duplicates")
    for column in ("way", "model calls", "call bytes", "result bytes", "total"):
        context.add_column(column, justify="left" if column == "way" else "right")
    for name, row in (("one program (execute_code)", code), ("direct calls", direct)):
        context.add_row(
            name,
            str(row.calls),
            f"{row.call_bytes:,}",
            f"{row.result_bytes:,}",
            f"{row.total:,}",
        )
    console.print(context)
    console.print(
        f"{report.saved_percent:.1f}% fewer bytes; the program scanned {report.scanned} "
        f"invoices with [bold]{report.code_calls}[/] tool calls from code and returned "
        f"{len(report.duplicates)} duplicates"
    )

    batch = report.batch
    total = ", ".join(format_amount(n, c) for c, n in batch.proposal["total"].items())
    console.print(
        f"the program proposed {batch.proposal['count']} refunds ({total}) as batch "
        f"{batch.batch_id}; one approval of fingerprint {batch.fingerprint[:16]}… committed them"
    )
    # Ids are folded, never cut short (the tail is where a look-alike differs); short headers
    # leave them room for a line of their own.
    refunds = Table(title="refunds (held: how many of the invoice's the service holds)")
    for column in ("invoice", "amount", "attempts", "refund", "held"):
        numeric = column in ("amount", "held")
        refunds.add_column(column, overflow="fold", justify="right" if numeric else "left")
    for step in report.refunds:
        receipt = step.receipt["receipt"]
        refunds.add_row(
            step.invoice_id,
            format_amount(receipt["amount_minor"], receipt["currency"]),
            " → ".join(_ATTEMPT.get(a, a) for a in step.attempts),
            str(receipt["id"]),
            str(step.service_refunds),
        )
    console.print(refunds)

    effects = Table(title=f"effects exercised by {report.run_id} (from the audit log)")
    for column in ("tool", "callers", "calls", "effects"):
        effects.add_column(column, overflow="fold")
    for found in report.effects:
        more = len(found.effects) - 2
        shown = "\n".join(found.effects[:2]) + (f"\n… {more} more" if more > 0 else "")
        effects.add_row(found.tool, ", ".join(found.callers), str(found.calls), shown)
    console.print(effects)
    console.print(f"audit log: {report.audit_db}")
    console.print(f"ledger:    {report.ledger_db}")
    console.print(
        f"look again: airlock audit show {report.run_id} --db {report.audit_db}\n"
        f"            airlock receipts list --ledger {report.ledger_db}\n"
        f"policy:     {DEMO_POLICY}"
    )
    console.print(f"[bold green]done in {report.seconds:.1f} s[/]")


def main() -> None:
    """Run :func:`demo` as a command."""
    typer.run(demo)


if __name__ == "__main__":
    main()
