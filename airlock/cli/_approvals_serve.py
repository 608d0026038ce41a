"""``airlock approvals serve``: the approval page (:mod:`airlock.cli._approval_page`) from
the command line."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from airlock.cli._approvals import LedgerOption, _fail, _open, default_ledger
from airlock.cli._approver import Approver
from airlock.cli._inventory import usage_errors
from airlock.cli._settings import login_name
from airlock.inventory import load_tool_registry
from airlock.policies import load_policy
from airlock.tools import InvalidInputError

__all__ = ["serve_approvals"]


def serve_approvals(
    ledger: LedgerOption = None,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.", min=1, max=65535)] = 8470,
    approver: Annotated[
        str | None, typer.Option("--as", help="Who approves on this page (default: your login).")
    ] = None,
    tools: Annotated[
        str | None,
        typer.Option(
            "--registry", help="MODULE:OBJECT of the Registry: approvals then commit at once."
        ),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option(
            help="The policy file: its self_approval setting, and with --registry the grants "
            "and rules each commit is judged by (required then).",
            dir_okay=False,
        ),
    ] = None,
    no_token: Annotated[
        bool,
        typer.Option("--no-token", help="No link token: anyone on this machine may approve."),
    ] = False,
) -> None:
    """Serve the approval page on 127.0.0.1: pending previews and batches with their effects,
    amounts and requester, approve or deny by the fingerprint shown, and the receipts."""
    if approver is not None and not approver.strip():
        raise _fail(InvalidInputError("--as '' names nobody; give the approver's id"))
    if tools is not None and policy is None:
        raise _fail(
            InvalidInputError(
                "--registry needs --policy FILE: each commit is judged by its grant and rules "
                "for the principal who asked, as the session's would be"
            )
        )
    with usage_errors():
        # Imported here: without the ``web`` extra this says which to install.
        from airlock.cli._approval_page import NO_TOKEN_WARNING, ApprovalPage, serve_page

        name = login_name() if approver is None else approver
        registry = load_tool_registry(tools) if tools is not None else None
        rules = load_policy(policy) if policy is not None else None
    store = _open(ledger, readonly=False)
    try:
        person = Approver.of_registry(
            name,
            store,
            self_approval=rules.self_approval if rules is not None else False,
            registry=registry,
            policy=rules,
        )
        token = None if no_token else secrets.token_urlsafe(24)
        page = ApprovalPage(person, ledger=str(ledger or default_ledger()), token=token)
        console = Console(soft_wrap=True, highlight=False)
        if token is None:
            Console(stderr=True).print(
                "[yellow]warning:[/] " + NO_TOKEN_WARNING.format(name=name), highlight=False
            )
        console.print(f"approvals page: {page.link(port)}", markup=False)
        serve_page(page, port=port)
    finally:
        store.close()
