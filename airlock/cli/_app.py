"""The ``airlock`` command: one Typer app, one command group per module of this package."""

from __future__ import annotations

import typer

from airlock.cli._approvals import approvals_app, receipts_app, reconcile
from airlock.cli._artifacts import artifacts_app
from airlock.cli._audit import audit_app
from airlock.cli._chat import chat
from airlock.cli._inventory import inventory, program_effects
from airlock.cli._run import doctor, run
from airlock.cli._serve import serve

__all__ = ["app", "main"]

app = typer.Typer(
    name="airlock",
    help="Run model-written programs in network-isolated containers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command()(run)
app.command()(doctor)
app.add_typer(audit_app, name="audit")
app.add_typer(artifacts_app, name="artifacts")
app.add_typer(approvals_app, name="approvals")
app.add_typer(receipts_app, name="receipts")
app.command()(reconcile)
app.command()(inventory)
app.command("program-effects")(program_effects)
app.command()(serve)
app.command()(chat)


def main() -> None:
    """Console-script entry point."""
    app()
