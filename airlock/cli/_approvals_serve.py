"""``airlock approvals serve``: the approval page (:mod:`airlock.cli._approval_page`) from
the command line."""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from airlock.cli._approval_ledger import LedgerOption, ledger_label, open_approval_ledger
from airlock.cli._approvals import _fail
from airlock.cli._approver import Approver
from airlock.cli._inventory import usage_errors
from airlock.cli._settings import login_name
from airlock.inventory import load_tool_registry
from airlock.policies import load_policy
from airlock.tools import InvalidInputError

__all__ = ["serve_approvals"]

# The ids :func:`airlock.tools.approve_preview` takes (``policy:`` ones are the rules'), whose
# check is private to tools: a page serving as another id would refuse every decision.
# test_approvals_cli_failures.py holds the two to the same answers.
_APPROVER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}")


def _check_approver(name: str, *, given: bool) -> None:
    if not _APPROVER.fullmatch(name) or name.startswith("policy:"):
        where = "--as" if given else "your login name"
        raise InvalidInputError(
            f"{where} {name[:64]!r} is not an approver id: a person's id is letters, digits "
            "and _ . @ : - (not starting with 'policy:'); "
            + ("give the approver's id" if given else "pass --as YOUR_ID")
        )


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
    _check_approver(name, given=approver is not None)  # (its error prints as one line)
    with usage_errors():
        registry = load_tool_registry(tools) if tools is not None else None
        rules = load_policy(policy) if policy is not None else None
    store = open_approval_ledger(ledger, readonly=False)
    try:
        person = Approver.of_registry(
            name,
            store,
            self_approval=rules.self_approval if rules is not None else False,
            registry=registry,
            policy=rules,
        )
        token = None if no_token else secrets.token_urlsafe(24)
        page = ApprovalPage(person, ledger=ledger_label(ledger), token=token)
        console = Console(soft_wrap=True, highlight=False)
        if token is None:
            Console(stderr=True).print(
                "[yellow]warning:[/] " + NO_TOKEN_WARNING.format(name=name), highlight=False
            )
        console.print(f"approvals page: {page.link(port)}", markup=False)
        serve_page(page, port=port)
    finally:
        store.close()
