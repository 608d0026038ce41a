"""The approval page's HTML: server-rendered, no script, every value escaped.

What a person needs to decide is on the page: who asked (the principal and run), the tool,
the summary, the effects and amounts as the tool's ``prepare`` computed them (never text the
model wrote), the full effect, the rule that asked, the expiry and the fingerprint the
approval will carry; for each item of a batch, the same. Each form carries the page's CSRF
token; none carries who approves.
Text that holds what the model wrote shows its control, bidi and zero-width characters as
escapes (:func:`airlock.cli._literal.visible`), so ``to al\\u200bice`` is not ``to alice``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from airlock.cli._literal import visible
from airlock.cli._utc import utc_time
from airlock.tools import Batch, BatchItem, Preview, Receipt

__all__ = ["BatchView", "PageView", "render_page", "render_refusal"]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; max-width: 72rem; color: #222; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
.warning { background: #fff3cd; border: 1px solid #e0c060; padding: .6rem; }
.notice { background: #e8f4ea; border: 1px solid #7bb38a; padding: .6rem; }
.error { background: #fbe9e9; border: 1px solid #d08080; padding: .6rem; }
.card { border: 1px solid #ccc; border-radius: 6px; padding: .8rem; margin: .8rem 0; }
.item { border-top: 1px dashed #ccc; margin-top: .8rem; padding-top: .4rem; }
.mono, pre { font-family: ui-monospace, monospace; font-size: .85rem; }
pre { background: #f6f6f6; padding: .5rem; overflow-x: auto; }
table { border-collapse: collapse; } td, th { border: 1px solid #ddd; padding: .3rem .5rem; }
form { display: inline-block; margin-right: 1rem; }
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchView:
    """A batch with an item still waiting, as the page shows it."""

    batch: Batch
    items: Sequence[tuple[BatchItem, Preview | None]]
    """Each item, where it stands, and its preview (what approving it would send)."""
    waiting_spend: dict[str, int]
    """Spend per currency, in minor units, of the items still waiting: what approving the
    batch would approve."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PageView:
    """What one rendering of the page shows."""

    base: str
    """The page's own path, which its forms post under."""
    approver: str
    ledger: str
    commits: bool
    """Approvals are committed by the page (it has the tools); else the asking harness does."""
    csrf: str
    waiting: Sequence[Preview]
    approved: Sequence[Preview]
    """Approved and not yet committed (or in flight)."""
    receipts: Sequence[Receipt]
    batches: Sequence[BatchView]
    """Batches with an item still waiting."""
    self_approval: bool
    warning: str | None = None
    notice: str | None = None
    error: str | None = None
    skipped: Sequence[str] = ()
    """Previews and batches left out because their rows do not read back."""
    left_out: Sequence[str] = ()
    """What the page's limits left out, one sentence each."""
    now: float


def _time(ts: float) -> str:
    return utc_time(ts, zone=True)


def _in_minutes(seconds: float) -> str:
    if math.isnan(seconds):
        return "?"
    if seconds > 10 * 366 * 86400:  # a ttl of "never" would print a number of 300 digits
        return "more than 10 years"
    return f"{max(0, round(seconds / 60))} min"


def _amounts(effects: Sequence[str]) -> str:
    spends = [e.removeprefix("spend(").removesuffix(")") for e in effects if e.startswith("spend(")]
    return ", ".join(spends) or "none"


def _shown(text: str) -> str:
    return escape(visible(text))


def _csrf(view: PageView) -> str:
    return f'<input type="hidden" name="csrf" value="{escape(view.csrf)}">'


def _facts(view: PageView, p: Preview, *, first: Sequence[tuple[str, str]]) -> str:
    """What approving ``p`` would send: the rows ``first``, then its effects, amounts, rule,
    expiry and fingerprint, and the full effect as the tool computed it."""
    rows = [
        *first,
        ("effects", _shown(", ".join(p.effects))),
        ("amounts (minor units)", _shown(_amounts(p.effects))),
        ("rule", escape(p.rule)),
        ("expires", f"{escape(_time(p.expires))} (in {_in_minutes(p.expires - view.now)})"),
        ("fingerprint", f'<span class="mono fingerprint">{escape(p.fingerprint)}</span>'),
    ]
    table = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    effect = escape(json.dumps(p.effect, indent=2, sort_keys=True))
    return f"""<table>{table}</table>
  <details><summary>effect as the tool computed it</summary><pre>{effect}</pre></details>"""


def _approve_form(view: PageView, p: Preview, label: str, *, kind: str = "approve") -> str:
    return f"""<form method="post" action="{escape(view.base)}approve">
    {_csrf(view)}
    <input type="hidden" name="preview_id" value="{escape(p.id)}">
    <input type="hidden" name="fingerprint" value="{escape(p.fingerprint)}">
    <button type="submit" class="{kind}">{label} {escape(p.fingerprint[:12])}…</button>
  </form>"""


def _deny_form(view: PageView, route: str, name: str, value: str, label: str) -> str:
    return f"""<form method="post" action="{escape(view.base)}{route}">
    {_csrf(view)}
    <input type="hidden" name="{name}" value="{escape(value)}">
    <input type="text" name="reason" placeholder="why (required)" required maxlength="500">
    <button type="submit" class="deny">{label}</button>
  </form>"""


def _preview_card(view: PageView, p: Preview) -> str:
    requester = f"{p.principal.user_id}@{p.principal.tenant_id}"
    own = not view.self_approval and view.approver in (p.principal.user_id, requester)
    facts = _facts(
        view,
        p,
        first=[
            ("tool", _shown(p.tool)),
            (
                "requested by",
                f"{escape(requester)} (run <span class=mono>{escape(p.run_id)}</span>)",
            ),
            ("summary", _shown(p.summary)),
        ],
    )
    pid = escape(p.id)
    note = (
        "<p class=warning>You asked for this change: another person must approve it.</p>"
        if own
        else ""
    )
    return f"""
<div class="card preview" id="{pid}" data-preview="{pid}">
  <h3 class=mono>{pid}</h3>
  {facts}
  {note}
  {_approve_form(view, p, "Approve fingerprint")}
  {_deny_form(view, "deny", "preview_id", p.id, "Deny")}
</div>"""


def _batch_item(view: PageView, item: BatchItem, p: Preview | None) -> str:
    pid = escape(item.preview_id)
    if p is None:  # gone from the ledger: approving the batch cannot send it
        return f'<div class="item" data-item="{pid}"><p class=mono>{pid}: not found</p></div>'
    rows = [("tool", _shown(item.tool)), ("summary", _shown(item.summary))]
    rows.append(("state", escape(item.state)))
    # Approving one item approves its own fingerprint: the batch's others still wait.
    decide = (
        _approve_form(view, p, "Approve this item, fingerprint", kind="approve-item")
        + _deny_form(view, "deny", "preview_id", item.preview_id, "Deny this item")
        if item.state == "waiting"
        else ""
    )
    return f"""
  <div class="item" data-item="{pid}">
  <h4 class=mono>{pid}</h4>
  {_facts(view, p, first=rows)}
  {decide}
  </div>"""


def _batch_card(view: PageView, shown: BatchView) -> str:
    batch = shown.batch
    requester = f"{batch.principal.user_id}@{batch.principal.tenant_id}"
    rows = "".join(
        f"<tr><td class=mono>{escape(i.preview_id)}</td><td>{_shown(i.tool)}</td>"
        f"<td>{_shown(i.summary)}</td><td>{escape(i.state)}</td></tr>"
        for i, _ in shown.items
    )
    spend = shown.waiting_spend
    total = ", ".join(f"{amount} {currency}" for currency, amount in spend.items()) or "none"
    items = "".join(_batch_item(view, item, p) for item, p in shown.items)
    bid = escape(batch.id)
    return f"""
<div class="card batch" id="{bid}" data-batch="{bid}">
  <h3 class=mono>batch {bid}</h3>
  <p>{len(shown.items)} item(s) proposed by a program of {escape(requester)}
     (run <span class=mono>{escape(batch.run_id)}</span>);
     spend still waiting, in minor units: <span class=total>{escape(total)}</span></p>
  <p>fingerprint <span class="mono fingerprint">{escape(batch.fingerprint)}</span></p>
  <table><tr><th>preview</th><th>tool</th><th>summary</th><th>state</th></tr>{rows}</table>
  <p>Approving the batch approves every item still waiting, each as shown below.</p>
  <form method="post" action="{escape(view.base)}approve-batch">
    {_csrf(view)}
    <input type="hidden" name="batch_id" value="{bid}">
    <input type="hidden" name="fingerprint" value="{escape(batch.fingerprint)}">
    <button type="submit" class="approve">Approve batch, fingerprint
      {escape(batch.fingerprint[:12])}…</button>
  </form>
  {_deny_form(view, "deny-batch", "batch_id", batch.id, "Deny every waiting item")}
  {items}
</div>"""


def _receipts(receipts: Sequence[Receipt]) -> str:
    if not receipts:
        return "<p>No receipts yet.</p>"
    rows = "".join(
        f'<tr class="receipt" data-preview="{escape(r.preview_id)}">'
        f"<td>{escape(_time(r.stored_at))}</td><td class=mono>{escape(r.preview_id)}</td>"
        f"<td>{escape(r.tool)}</td><td>{escape(r.resolved_by)}</td>"
        f"<td class=mono>{escape(json.dumps(r.data, sort_keys=True))}</td></tr>"
        for r in receipts
    )
    head = "<tr><th>stored</th><th>preview</th><th>tool</th><th>how</th><th>receipt</th></tr>"
    return f"<table id=receipts>{head}{rows}</table>"


def render_page(view: PageView) -> str:
    """The whole page for ``view``."""
    banners = "".join(
        f'<p class="{kind}" id="{kind}">{escape(text)}</p>'
        for kind, text in (
            ("warning", view.warning),
            ("notice", view.notice),
            ("error", view.error),
        )
        if text
    )
    if view.skipped:
        shown = ", ".join(view.skipped)
        banners += (
            f'<p class="error" id="skipped">{len(view.skipped)} record(s) of the ledger do not '
            "read back (changed by hand, or a bad restore) and are not shown: "
            f"{escape(shown)}; `airlock approvals show ID` says what is wrong.</p>"
        )
    if view.left_out:
        banners += (
            '<p class="warning" id="left-out">Not everything is shown: '
            f"{escape('; '.join(view.left_out))}.</p>"
        )
    how = (
        "An approval here commits the write at once, once, and shows its receipt."
        if view.commits
        else "An approval here is recorded; the session that asked commits the write once."
    )
    waiting = "".join(_preview_card(view, p) for p in view.waiting) or (
        "<p id=nothing>Nothing waits for approval.</p>"
    )
    batches = "".join(_batch_card(view, b) for b in view.batches)
    approved = "".join(
        f"<li class=mono>{escape(p.id)} {_shown(p.tool)} [{escape(p.state)}] "
        f"{_shown(p.summary)}</li>"
        for p in view.approved
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>airlock approvals</title><style>{_STYLE}</style></head>
<body>
<h1>airlock approvals</h1>
<p>Approving as <strong id="approver">{escape(view.approver)}</strong> on ledger
<span class=mono>{escape(view.ledger)}</span>. {escape(how)}</p>
{banners}
<h2>Waiting for approval</h2>
{batches}
{waiting}
<h2>Approved, not yet committed</h2>
<ul>{approved or "<li>none</li>"}</ul>
<h2>Receipts</h2>
{_receipts(view.receipts)}
<p><a href="{escape(view.base)}">refresh</a></p>
</body></html>
"""


def render_refusal(title: str, message: str) -> str:
    """A small page that says why a request was refused."""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title></head>
<body><h1>{escape(title)}</h1><p>{escape(message)}</p></body></html>
"""
