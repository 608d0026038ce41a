"""``airlock approvals``, ``airlock receipts`` and ``airlock reconcile``: the person who
approves writes, and the operator who resolves writes a crash left undecided."""

from __future__ import annotations

import hmac
import json
import time
from functools import partial
from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.console import Console
from rich.text import Text

from airlock.cli._approval_ledger import LedgerOption, default_ledger
from airlock.cli._approval_ledger import open_approval_ledger as _open
from airlock.cli._approval_view import read_batches
from airlock.cli._approver import Approver
from airlock.cli._batches import COMMIT_HERE, age, approve_batch_command, print_batches, show_batch
from airlock.cli._inventory import usage_errors
from airlock.cli._literal import json_text, literal, table
from airlock.cli._settings import login_name
from airlock.cli._utc import utc_time
from airlock.inventory import load_tool_registry
from airlock.policies import load_policy
from airlock.tools import (
    BATCH_PREFIX,
    Approval,
    ConflictError,
    InvalidInputError,
    Preview,
    ToolError,
    WritePath,
    deny_preview,
)

__all__ = ["approvals_app", "default_ledger", "receipts_app", "reconcile"]

approvals_app = typer.Typer(
    name="approvals",
    help="Previews of writes waiting for a person: list, show, approve, deny, serve (a page).",
    no_args_is_help=True,
)
receipts_app = typer.Typer(
    name="receipts",
    help="Receipts of committed writes, as the system of record answered.",
    no_args_is_help=True,
)


def _fail(exc: ToolError) -> typer.Exit:
    # The message can quote what the model or the ledger holds: never markup.
    Console(stderr=True, soft_wrap=True).print(
        Text.assemble((exc.code, "red"), ": ", literal(exc.message))
    )
    return typer.Exit(code=1)


def _time(ts: float) -> str:
    return utc_time(ts)


@approvals_app.command("list")
def list_pending(
    ledger: LedgerOption = None,
    all_states: Annotated[
        bool, typer.Option("--all", help="Every preview and batch, not only those waiting.")
    ] = False,
    limit: Annotated[
        int, typer.Option(min=1, help="Show at most this many previews, and as many batches.")
    ] = 100,
) -> None:
    """List previews waiting for approval (principal, tool, effect summary, age, expiry), then
    the batches with an item waiting (items waiting of all, the fingerprint to approve with)."""
    store = _open(ledger, readonly=True)
    now = time.time()
    try:
        previews = store.previews(states=None if all_states else {"prepared"}, limit=limit)
        batches = read_batches(store, now=now, limit=limit, every=all_states)
    finally:
        store.close()
    title = "previews" if all_states else "previews waiting for approval"
    shown = table("id", "state", "principal", "tool", "effect", "age", "expires in", title=title)
    for p in previews:
        expiry = "expired" if p.expired(now) else age(p.expires - now)
        principal = f"{p.principal.user_id}@{p.principal.tenant_id}"
        shown.add_row(
            *map(literal, (p.id, p.state, principal, p.tool, p.summary)),
            age(now - p.created),
            expiry,
        )
    if previews:
        Console(width=220).print(shown)
    print_batches(batches, every=all_states, now=now)
    if not previews and not batches.batches:
        Console().print("nothing waits for approval")


@approvals_app.command("show")
def show(
    preview_id: Annotated[str, typer.Argument(help="The preview id, pv_...")],
    ledger: LedgerOption = None,
) -> None:
    """Show the full effect as code computed it, the fingerprint, the rule and the history."""
    store = _open(ledger, readonly=True)
    if preview_id.startswith(BATCH_PREFIX):  # a batch: its fingerprint and every item
        try:
            show_batch(store, preview_id)
        except ToolError as exc:
            raise _fail(exc) from None
        finally:
            store.close()
        return
    try:
        preview = store.preview(preview_id)
        if preview is None:
            Console(stderr=True).print(f"no preview {preview_id!r}")
            raise typer.Exit(code=1)
        approval = store.approval(preview_id)
        history = store.history(preview_id)
        receipt = store.receipt(preview.key)
    finally:
        store.close()
    console = Console(width=200)
    console.print(_describe(preview))
    console.print("effect (computed by the tool's prepare):")
    console.print(json_text(preview.effect), soft_wrap=True)
    if approval is not None:
        console.print(
            literal(
                f"approval: {approval.kind} {approval.approver} at {_time(approval.at)}"
                + (f", consumed at {_time(approval.consumed_at)}" if approval.consumed_at else "")
                + (f" ({approval.reason})" if approval.reason else "")
            )
        )
    if receipt is not None and receipt.preview_id == preview.id:
        console.print(f"receipt ({receipt.resolved_by}):")
        console.print(json_text(receipt.data), soft_wrap=True)
    steps = table("time (UTC)", "from", "to", "by", "how", title="history")
    for event in history:
        steps.add_row(
            _time(event.at),
            *map(literal, (event.from_state or "", event.to_state, event.actor, event.how)),
        )
    console.print(steps)


def _describe(p: Preview) -> Text:
    # Each line is one line: a newline in the summary must not forge the next field.
    return Text("\n").join(
        literal(line)
        for line in [
            f"preview      {p.id}  [{p.state}]",
            f"tool         {p.tool}",
            f"principal    {p.principal.user_id}@{p.principal.tenant_id}  (run {p.run_id})",
            f"summary      {p.summary}",
            f"effects      {', '.join(p.effects)}",
            f"rule         {p.rule}",
            f"fingerprint  {p.fingerprint}",
            f"key          {p.key}",
            f"created      {_time(p.created)} UTC, expires {_time(p.expires)} UTC",
        ]
        + ([f"error        {p.error}"] if p.error else [])
    )


@approvals_app.command("approve")
def approve(
    preview_id: Annotated[str, typer.Argument(help="The preview id, pv_...")],
    ledger: LedgerOption = None,
    fingerprint: Annotated[
        str | None,
        typer.Option(help="The fingerprint you reviewed (from `show`); refused if it changed."),
    ] = None,
    approver: Annotated[
        str | None, typer.Option("--as", help="Your id (default: your login name).")
    ] = None,
    reason: Annotated[str, typer.Option(help="A note kept with the approval.")] = "",
    commit: Annotated[
        bool,
        typer.Option(
            "--commit",
            help="Commit it now, once, through --registry's tools (with the receipt), if "
            "--policy's grant and rules still allow it for the principal who asked.",
        ),
    ] = False,
    tools: Annotated[
        str | None,
        typer.Option("--registry", help="MODULE:OBJECT of the Registry that commits (--commit)."),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option(
            help="The policy file: its self_approval lets a requester approve their own write, "
            "and with --commit its grants and rules judge the write (required then).",
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Approve a preview's fingerprint; the harness that asked then commits it once (or this
    command does, with --commit, unless the policy no longer allows it: then it is denied).
    With --commit, one approved before with this fingerprint is committed (its session may
    have ended)."""
    if fingerprint is None:
        raise _fail(
            InvalidInputError(
                f"give --fingerprint: the one you reviewed (airlock approvals show {preview_id})"
            )
        )
    if commit and tools is None:
        raise _fail(InvalidInputError("--commit needs --registry MODULE:OBJECT: the tools"))
    if commit and policy is None:
        raise _fail(
            InvalidInputError(
                "--commit needs --policy FILE: the commit is judged by its grant and rules "
                "for the principal who asked, as the session's would be"
            )
        )
    with usage_errors():
        registry = load_tool_registry(tools) if commit and tools is not None else None
        rules = load_policy(policy) if policy is not None else None
        self_approval = rules.self_approval if rules is not None else False
    store = _open(ledger, readonly=False)
    if preview_id.startswith(BATCH_PREFIX):  # a batch a program proposed: one fingerprint
        try:
            approve_batch_command(
                store,
                preview_id,
                approver=login_name() if approver is None else approver,
                fingerprint=fingerprint,
                reason=reason,
                self_approval=self_approval,
                registry=registry,
                policy=rules,
            )
        except ToolError as exc:
            raise _fail(exc) from None
        finally:
            store.close()
        return
    try:
        person = Approver.of_registry(
            login_name() if approver is None else approver,
            store,
            self_approval=self_approval,
            registry=registry,
            policy=rules,
        )
        try:
            before = None
            done = anyio.run(
                partial(person.approve, preview_id, fingerprint=fingerprint, reason=reason)
            )
        except ConflictError:
            before = _approved_before(person, preview_id, fingerprint) if commit else None
            if before is None:
                raise
            done = anyio.run(person.commit, before)  # approved, and left by a session gone
    except ToolError as exc:
        raise _fail(exc) from None
    finally:
        store.close()
    console = Console()
    approval = done.approval
    how = "already approved" if before is not None else "approved"
    console.print(
        literal(
            f"{how} {preview_id} (fingerprint {approval.fingerprint[:16]}…) "
            f"{'by' if before is not None else 'as'} {approval.approver}"
        )
    )
    if done.in_flight:
        console.print("a harness is committing it now; `approvals show` will list the receipt")
    elif done.receipt is not None:
        how = "already committed" if done.receipt.replayed else "committed"
        console.print(f"{how}; receipt:", highlight=False)
        console.print(json_text(done.receipt.data), soft_wrap=True)
    elif not commit:
        console.print(COMMIT_HERE.format(it="it"), highlight=False)
    else:
        Console(stderr=True).print(
            "not committed here: an approved read, or a write holding Secret() values, runs "
            "only in the session that asked (it alone has them); if that session has ended, "
            "nothing will run it",
            highlight=False,
        )
        raise typer.Exit(code=1)


def _approved_before(person: Approver, preview_id: str, fingerprint: str) -> Approval | None:
    """The approval of ``fingerprint`` the preview was given before (by a person, or by the
    policy's rule), for ``approve --commit`` to commit as the session that asked would have
    (it may have ended), or to replay its receipt once committed; ``None`` when there is
    none, or ``person`` asked for the write and the policy does not allow self-approval."""
    preview, approval = person.ledger.preview(preview_id), person.ledger.approval(preview_id)
    if preview is None or approval is None or preview.state not in ("approved", "committed"):
        return None
    asked = preview.principal.user_id, f"{preview.principal.user_id}@{preview.principal.tenant_id}"
    if not person.self_approval and person.name in asked:
        return None
    # As bytes: compare_digest refuses a str with non-ASCII characters.
    same = hmac.compare_digest(
        fingerprint.encode("utf-8", "surrogatepass"), approval.fingerprint.encode()
    )
    return approval if same else None


@approvals_app.command("deny")
def deny(
    preview_id: Annotated[str, typer.Argument(help="The preview id, pv_...")],
    reason: Annotated[str, typer.Option(help="Why; the run's owner sees it.")],
    ledger: LedgerOption = None,
    approver: Annotated[
        str | None, typer.Option("--as", help="Your id (default: your login name).")
    ] = None,
) -> None:
    """Refuse a preview; it can never be committed."""
    store = _open(ledger, readonly=False)
    try:
        deny_preview(
            store,
            preview_id,
            approver=login_name() if approver is None else approver,
            reason=reason,
            now=time.time(),
        )
    except ToolError as exc:
        raise _fail(exc) from None
    finally:
        store.close()
    Console().print(f"denied {preview_id}: {reason}", highlight=False)


@receipts_app.command("list")
def list_receipts(
    ledger: LedgerOption = None,
    limit: Annotated[int, typer.Option(min=1, help="Show at most this many.")] = 100,
) -> None:
    """List stored receipts, newest first."""
    store = _open(ledger, readonly=True)
    try:
        receipts = store.receipts(limit=limit)
    finally:
        store.close()
    shown = table(
        "stored (UTC)", "preview", "tool", "how", "receipt", title="receipts (newest first)"
    )
    for r in receipts:
        shown.add_row(
            _time(r.stored_at),
            *map(literal, (r.preview_id, r.tool, r.resolved_by, json.dumps(r.data))),
        )
    Console(width=220).print(shown if receipts else "no receipts yet")


def reconcile(
    ledger: LedgerOption = None,
    tools: Annotated[
        str | None,
        typer.Option(
            "--registry",
            help="MODULE:OBJECT of the Registry (or a function returning it) whose write "
            "tools can query or resend; without it, undecided steps are only listed.",
        ),
    ] = None,
) -> None:
    """Resolve every write a timeout or crash left undecided: query the system of record or
    resend with the same key, never a fresh write. Exits 1 while any stays undecided, and 2
    when ``--registry`` does not name a tools.Registry (printed with its code)."""
    if tools is None:
        store = _open(ledger, readonly=True)
        try:
            undecided = store.previews(states={"unknown", "sending"})
        finally:
            store.close()
        for p in undecided:
            Console().print(literal(f"{p.id} {p.tool} [{p.state}] {p.summary}"))
        if undecided:
            Console(stderr=True).print(
                f"{len(undecided)} undecided; pass --registry to resolve them"
            )
            raise typer.Exit(code=1)
        Console().print("nothing to reconcile")
        return
    with usage_errors():
        registry = load_tool_registry(tools)
    store = _open(ledger, readonly=False)
    try:
        resolutions = anyio.run(WritePath(registry, store).reconcile)
    finally:
        store.close()
    shown = table("preview", "tool", "before", "after", "outcome", "how", title="reconcile")
    for r in resolutions:
        shown.add_row(*map(literal, (r.preview_id, r.tool, r.before, r.after, r.outcome, r.how)))
    Console(width=200).print(shown if resolutions else "nothing to reconcile")
    if any(r.outcome in ("unresolved", "in_flight") for r in resolutions):
        raise typer.Exit(code=1)
