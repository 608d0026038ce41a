"""The ``airlock`` command line."""

from __future__ import annotations

import typer

from airlock._cli_approvals import approvals_app, receipts_app, reconcile
from airlock._cli_audit import audit_app
from airlock._cli_chat import chat
from airlock._cli_inventory import inventory, program_effects
from airlock._cli_serve import serve
from airlock._demo import demo
from airlock._run_cli import doctor, run

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
app.command()(demo)
app.add_typer(audit_app, name="audit")
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


if __name__ == "__main__":
    main()
