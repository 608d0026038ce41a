"""``airlock approvals serve``: a page where a person approves or denies writes in a browser.

Starlette on loopback, server-rendered HTML (:mod:`airlock.cli._approval_html`), no script
and no build step. Who may use it and as whom::

    who approves   the configured approver (``--as``, default the login name): never a form
                   field, never the run; the page only says yes or no for that person
    who gets in    with a token (default): the link airlock prints, once, sets an HttpOnly,
                   SameSite=Strict session cookie; without it, 401. ``--no-token``: anyone
                   who can reach the loopback port, with a warning on the console and page
    forged posts   every form carries the page's CSRF token (random per rendering, bound to
                   the session, 15 minutes); a post without it, or from another Origin, 403
    other hosts    a Host header other than 127.0.0.1 or localhost (DNS rebinding): 400

Approving records the person's approval of the fingerprint shown; with the tools
(``--registry``) the page commits it at once through the write path's claim, so a harness
committing the same preview cannot double it, and shows the receipt. Without them the
session that asked commits it (``airlock serve`` and ``chat`` do within a second).
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from urllib.parse import parse_qs

from airlock._extras import requires_extra
from airlock.cli._approval_html import PageView, render_page, render_refusal
from airlock.cli._approver import Approver
from airlock.tools import Batch, BatchItem, ToolError, batch_items, spend_totals

with requires_extra("web", feature="the approval page (airlock approvals serve)"):
    import uvicorn
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, RedirectResponse, Response
    from starlette.routing import Route

__all__ = ["COOKIE", "LOOPBACK", "ApprovalPage", "serve_page"]

LOOPBACK = "127.0.0.1"
COOKIE = "airlock_approvals"
_CSRF_TTL = 900.0
_MAX_FORM_BYTES = 16_384
_MAX_FORM_FIELDS = 10
_MAX_TOKENS = 10_000
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    # Not no-referrer: Chromium then sends "Origin: null" with the page's own form posts.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}
NO_TOKEN_WARNING = (
    "no token: anyone who can reach this port on this machine can approve writes as {name}"
)


class ApprovalPage:
    """The approval page of one approver on one ledger.

    Args:
        approver: who decides, on which ledger, and whether approvals commit here.
        ledger: the ledger's path, as the page names it.
        token: the secret of the link that lets a browser in; ``None`` for loopback-only
            access without one (the page then shows a warning).
        clock: wall-clock time (tests move it).
    """

    def __init__(
        self,
        approver: Approver,
        *,
        ledger: str,
        token: str | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.approver = approver
        self.ledger = ledger
        self.token = token
        self.clock = clock
        self._sessions: OrderedDict[str, None] = OrderedDict()
        self._csrf: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._flash: dict[str, tuple[str, str]] = {}

    def app(self) -> Starlette:
        """The Starlette application."""
        return Starlette(
            routes=[
                Route("/", self._index, methods=["GET"]),
                Route("/approve", self._approve, methods=["POST"]),
                Route("/approve-batch", self._approve_batch, methods=["POST"]),
                Route("/deny", self._deny, methods=["POST"]),
            ],
            middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=[LOOPBACK, "localhost"])],
        )

    # -- who is asking -------------------------------------------------------------------

    def _session(self, request: Request) -> str | None:
        """The browser session of ``request``: ``""`` when no token is needed."""
        if self.token is None:
            return ""
        cookie = request.cookies.get(COOKIE, "")
        return cookie if cookie and cookie in self._sessions else None

    def _login(self, request: Request) -> Response | None:
        given = request.query_params.get("token")
        if self.token is None or given is None:
            return None
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return _page(401, "not allowed", "this link's token is not the page's")
        session = secrets.token_urlsafe(32)
        self._sessions[session] = None
        while len(self._sessions) > _MAX_TOKENS:
            oldest, _ = self._sessions.popitem(last=False)
            self._flash.pop(oldest, None)
        response = RedirectResponse("/", status_code=303, headers=_HEADERS)
        response.set_cookie(COOKIE, session, httponly=True, samesite="strict", path="/")
        return response

    def _issue_csrf(self, session: str) -> str:
        now = self.clock()
        token = secrets.token_urlsafe(32)
        self._csrf[token] = (session, now + _CSRF_TTL)
        while self._csrf and (
            len(self._csrf) > _MAX_TOKENS or next(iter(self._csrf.values()))[1] < now
        ):
            self._csrf.popitem(last=False)
        return token

    async def _form(self, request: Request) -> tuple[str, dict[str, str]] | Response:
        """The session and the fields of a form post, or the refusal."""
        session = self._session(request)
        if session is None:
            return _page(401, "not allowed", "open the link `airlock approvals serve` printed")
        origin = request.headers.get("origin")
        if origin is not None and origin != f"http://{request.headers.get('host', '')}":
            return _page(403, "refused", f"a form posted from {origin[:100]!r} is not this page's")
        kind = request.headers.get("content-type", "").split(";")[0].strip()
        if kind != "application/x-www-form-urlencoded":
            return _page(415, "refused", "post the page's own forms")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > _MAX_FORM_BYTES:  # refused before the rest is read, not after
                return _page(413, "refused", "the form is too large")
        try:
            posted = parse_qs(body.decode("utf-8", "replace"), max_num_fields=_MAX_FORM_FIELDS)
        except ValueError:  # more fields than any of the page's forms has
            why = f"the form has more than {_MAX_FORM_FIELDS} fields; post the page's own forms"
            return _page(413, "refused", why)
        fields = {k: v[0] for k, v in posted.items()}
        issued = self._csrf.get(fields.get("csrf", ""))
        if issued is None or issued[0] != session or issued[1] < self.clock():
            return _page(403, "refused", "this form is stale or not the page's; reload the page")
        return session, fields

    # -- pages ---------------------------------------------------------------------------

    async def _index(self, request: Request) -> Response:
        login = self._login(request)
        if login is not None:
            return login
        session = self._session(request)
        if session is None:
            return _page(401, "not allowed", "open the link `airlock approvals serve` printed")
        flash = self._flash.pop(session, None)
        view = self._view(self._issue_csrf(session), flash)
        return HTMLResponse(render_page(view), headers=_HEADERS)

    def _view(self, csrf: str, flash: tuple[str, str] | None) -> PageView:
        store = self.approver.ledger
        now = self.clock()
        batches = _open_batches(self.approver, now)
        in_batches = {item.preview_id for _, items, _ in batches for item in items}
        waiting = [
            p
            for p in store.previews(states={"prepared"}, limit=200)
            if not p.expired(now) and p.id not in in_batches
        ]
        return PageView(
            approver=self.approver.name,
            ledger=self.ledger,
            commits=self.approver.commits,
            csrf=csrf,
            waiting=waiting,
            approved=store.previews(states={"approved", "sending", "unknown"}, limit=200),
            receipts=store.receipts(limit=50),
            batches=batches,
            self_approval=self.approver.self_approval,
            warning=None if self.token else NO_TOKEN_WARNING.format(name=self.approver.name),
            notice=flash[1] if flash and flash[0] == "notice" else None,
            error=flash[1] if flash and flash[0] == "error" else None,
            now=now,
        )

    async def _approve(self, request: Request) -> Response:
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        session, fields = form
        preview_id, fingerprint = fields.get("preview_id", ""), fields.get("fingerprint", "")
        try:
            done = await self.approver.approve(preview_id, fingerprint=fingerprint)
        except ToolError as exc:
            return self._back(session, "error", f"{exc.code}: {exc.message}")
        text = f"approved {preview_id} as {self.approver.name}"
        if done.receipt is not None:
            text += f"; committed once, receipt {done.receipt.data}"
        elif done.in_flight:
            text += "; a session is committing it now"
        else:
            text += "; the session that asked commits it"
        return self._back(session, "notice", text)

    async def _approve_batch(self, request: Request) -> Response:
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        session, fields = form
        batch_id, fingerprint = fields.get("batch_id", ""), fields.get("fingerprint", "")
        try:
            items = await self.approver.approve_batch(batch_id, fingerprint=fingerprint)
        except ToolError as exc:
            return self._back(session, "error", f"{exc.code}: {exc.message}")
        states: dict[str, int] = {}
        for item in items:
            states[item.state] = states.get(item.state, 0) + 1
        counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
        return self._back(
            session, "notice", f"approved batch {batch_id} as {self.approver.name}: {counts}"
        )

    async def _deny(self, request: Request) -> Response:
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        session, fields = form
        preview_id, reason = fields.get("preview_id", ""), fields.get("reason", "")
        try:
            self.approver.deny(preview_id, reason=reason)
        except ToolError as exc:
            return self._back(session, "error", f"{exc.code}: {exc.message}")
        return self._back(session, "notice", f"denied {preview_id}: {reason[:200]}")

    def _back(self, session: str, kind: str, text: str) -> Response:
        self._flash[session] = (kind, text)
        return RedirectResponse("/", status_code=303, headers=_HEADERS)


def _open_batches(
    approver: Approver, now: float
) -> list[tuple[Batch, tuple[BatchItem, ...], dict[str, int]]]:
    """Batches with an item still waiting, newest first, with spend per currency."""
    found = []
    for batch in approver.ledger.batches(limit=50):
        try:
            items = batch_items(approver.ledger, batch.id, now=now)
        except ToolError:
            continue  # changed behind the write path's back: `approvals show` says so
        if any(item.state == "waiting" for item in items):
            previews = [approver.ledger.preview(i) for i in batch.items]
            totals = spend_totals([p for p in previews if p is not None])
            found.append((batch, items, totals))
    return found


def _page(status: int, title: str, message: str) -> Response:
    return HTMLResponse(render_refusal(title, message), status_code=status, headers=_HEADERS)


def serve_page(page: ApprovalPage, *, port: int) -> None:
    """Serve ``page`` on ``127.0.0.1:port`` until interrupted."""
    config = uvicorn.Config(page.app(), host=LOOPBACK, port=port, log_level="warning")
    uvicorn.Server(config).run()
