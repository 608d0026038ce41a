"""``airlock approvals serve``: a page where a person approves or denies writes in a browser.

Starlette on loopback, server-rendered HTML (:mod:`airlock.cli._approval_html`), no script
and no build step. Who may use it and as whom::

    who approves   the configured approver (``--as``, default the login name): never a form
                   field, never the run; the page only says yes or no for that person
    who gets in    with a token (default): the link airlock prints, once, sets an HttpOnly,
                   SameSite=Strict session cookie for 4 hours; without it, 401. ``--no-token``:
                   anyone who can reach the loopback port, with a warning on console and page
    other ports    cookies are not kept apart by port (RFC 6265 8.5), so the page lives under
                   a random path that the link names, and its cookie is sent there only:
                   another service on 127.0.0.1 that the browser visits never receives it
    forged posts   every form carries the page's CSRF token (random per rendering, bound to
                   the session, 15 minutes), and a post must say it comes from the page (its
                   Origin, or Sec-Fetch-Site: same-origin); else 403
    other hosts    a Host header other than 127.0.0.1 or localhost (DNS rebinding): 400
    slow clients   a form's body must arrive within 10 seconds (408), and the request's head
                   too (:mod:`airlock.cli._approval_server`)
    ledger fails   a post says the error's code on the page, the page itself is a 503 naming
                   it; a row that does not read back hides only itself (and is named)
    ledger locked  every ledger call runs on a worker thread: one waiting out another process's
                   lock (AIRLOCK_BUSY_TIMEOUT) holds up no other request, nor the deadlines

Approving records the person's approval of the fingerprint shown; with the tools
(``--registry``) the page commits it at once through the write path's claim, so a harness
committing the same preview cannot double it, and shows the receipt. Without them the
session that asked commits it (``airlock serve`` and ``chat`` do within a second).
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable, Sequence
from functools import partial
from urllib.parse import parse_qs

import anyio

from airlock._extras import requires_extra
from airlock.cli._approval_html import PageView, render_page, render_refusal
from airlock.cli._approval_server import page_server
from airlock.cli._approval_view import approved_now, read_ledger, undecided, undecided_of_batch
from airlock.cli._approver import Approver, off_loop
from airlock.cli._page_sessions import SESSION_TTL, PageSessions
from airlock.tools import ConflictError, LedgerError, ToolError, batch_items

with requires_extra("web", feature="the approval page (airlock approvals serve)"):
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import HTMLResponse, RedirectResponse, Response
    from starlette.routing import Route

    from airlock._http_limits import AUTHORIZED

__all__ = ["COOKIE", "LOOPBACK", "SESSION_TTL", "ApprovalPage", "serve_page"]

LOOPBACK = "127.0.0.1"
COOKIE = "airlock_approvals"
_BODY_TIMEOUT = 10.0
_MAX_FORM_BYTES = 16_384
_MAX_FORM_FIELDS = 10
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
    """The approval page of one approver on one ledger, under a random path of its own.

    Args:
        approver: who decides, on which ledger, and whether approvals commit here.
        ledger: the ledger's path, as the page names it.
        token: the secret of the link that lets a browser in; ``None`` for loopback-only
            access without one (the page then shows a warning).
        clock: wall-clock time (tests move it).
        body_timeout: seconds a form's body may take to arrive.
    """

    def __init__(
        self,
        approver: Approver,
        *,
        ledger: str,
        token: str | None,
        clock: Callable[[], float] = time.time,
        body_timeout: float = _BODY_TIMEOUT,
    ) -> None:
        self.approver = approver
        self.ledger = ledger
        self.token = token
        self.clock = clock
        self.body_timeout = body_timeout
        self.base = f"/{secrets.token_urlsafe(16)}/"
        """The page's path: the session cookie is sent under it only."""
        self._sessions = PageSessions(clock=clock)

    def link(self, port: int) -> str:
        """The address a person opens: with the token when the page has one."""
        query = "" if self.token is None else f"?token={self.token}"
        return f"http://{LOOPBACK}:{port}{self.base}{query}"

    def app(self) -> Starlette:
        """The Starlette application."""
        base = self.base
        return Starlette(
            routes=[
                Route(base, self._index, methods=["GET"]),
                Route(base + "approve", self._approve, methods=["POST"]),
                Route(base + "approve-batch", self._approve_batch, methods=["POST"]),
                Route(base + "deny", self._deny, methods=["POST"]),
                Route(base + "deny-batch", self._deny_batch, methods=["POST"]),
                Route("/{path:path}", _elsewhere, methods=["GET", "POST"]),
            ],
            middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=[LOOPBACK, "localhost"])],
        )

    # -- who is asking -------------------------------------------------------------------

    def _session(self, request: Request) -> str | None:
        """The browser session of ``request``: ``""`` when no token is needed. A request
        with one is marked allowed, so its connection is never closed to make room."""
        # Not request.cookies (the last value of a name wins): another service on 127.0.0.1
        # may set a cookie of the same name for Path=/, which the browser sends after the
        # page's own (RFC 6265 5.4), and that would log the person out for good.
        session = (
            ""
            if self.token is None
            else next((c for c in _cookie_values(request, COOKIE) if self._sessions.valid(c)), None)
        )
        if session is not None:
            request.scope.setdefault("state", {})[AUTHORIZED] = True
        return session

    def _login(self, request: Request) -> Response | None:
        given = request.query_params.get("token")
        if self.token is None or given is None:
            return None
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return _page(401, "not allowed", "this link's token is not the page's")
        response = RedirectResponse(self.base, status_code=303, headers=_HEADERS)
        response.set_cookie(
            COOKIE,
            self._sessions.open(),
            max_age=int(SESSION_TTL),
            path=self.base,
            httponly=True,
            samesite="strict",
        )
        return response

    async def _form(self, request: Request) -> tuple[str, dict[str, str]] | Response:
        """The session and the fields of a form post, or the refusal."""
        session = self._session(request)
        if session is None:
            return _page(401, "not allowed", "open the link `airlock approvals serve` printed")
        foreign = _not_from_the_page(request)
        if foreign is not None:
            return _page(403, "refused", foreign)
        kind = request.headers.get("content-type", "").split(";")[0].strip()
        if kind != "application/x-www-form-urlencoded":
            return _page(415, "refused", "post the page's own forms")
        body = bytearray()
        try:
            with anyio.fail_after(self.body_timeout):
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > _MAX_FORM_BYTES:  # refused before the rest is read, not after
                        return _page(413, "refused", "the form is too large")
        except TimeoutError:
            return _page(408, "refused", "the form did not arrive in time", close=True)
        except ClientDisconnect:
            return _page(400, "refused", "the form did not arrive whole", close=True)
        try:
            posted = parse_qs(body.decode("utf-8", "replace"), max_num_fields=_MAX_FORM_FIELDS)
        except ValueError:  # more fields than any of the page's forms has
            why = f"the form has more than {_MAX_FORM_FIELDS} fields; post the page's own forms"
            return _page(413, "refused", why)
        fields = {k: v[0] for k, v in posted.items()}
        if not self._sessions.csrf_valid(fields.get("csrf", ""), session):
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
        now = self.clock()
        try:
            read = await off_loop(partial(read_ledger, self.approver, now=now))
        except LedgerError as exc:  # the message after a post waits for the next page
            return _page(503, "the ledger cannot be read", _failed(exc))
        flash = self._sessions.told(session)
        view = PageView(
            base=self.base,
            approver=self.approver.name,
            ledger=self.ledger,
            commits=self.approver.commits,
            csrf=self._sessions.issue_csrf(session),
            waiting=read.waiting,
            approved=read.approved,
            receipts=read.receipts,
            batches=read.batches,
            skipped=read.skipped,
            left_out=read.left_out,
            self_approval=self.approver.self_approval,
            warning=None if self.token else NO_TOKEN_WARNING.format(name=self.approver.name),
            notice=flash[1] if flash and flash[0] == "notice" else None,
            error=flash[1] if flash and flash[0] == "error" else None,
            now=now,
        )
        return HTMLResponse(render_page(view), headers=_HEADERS)

    async def _approve(self, request: Request) -> Response:
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        session, fields = form
        preview_id, fingerprint = fields.get("preview_id", ""), fields.get("fingerprint", "")
        before: list[str] = []
        try:
            before = await off_loop(partial(undecided, self.approver.ledger, [preview_id]))
            done = await self.approver.approve(preview_id, fingerprint=fingerprint)
        except (ToolError, LedgerError) as exc:
            return self._back(session, "error", await self._failed_after(exc, before))
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
        before: list[str] = []
        try:
            before = await off_loop(partial(undecided_of_batch, self.approver.ledger, batch_id))
            items = await self.approver.approve_batch(batch_id, fingerprint=fingerprint)
        except (ToolError, LedgerError) as exc:
            return self._back(session, "error", await self._failed_after(exc, before))
        states: dict[str, int] = {}
        for item in items:
            states[item.state] = states.get(item.state, 0) + 1
        counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
        # Nothing approved now: every item expired or was decided meanwhile.
        if await off_loop(partial(approved_now, self.approver, before)) == []:
            return self._back(
                session, "error", f"nothing of batch {batch_id} was approved: {counts}"
            )
        text = f"approved batch {batch_id} as {self.approver.name}: {counts}"
        if "approved" in states:  # not committed here: no tools, or an item's Secret() values
            text += "; the session that asked commits it"
        return self._back(session, "notice", text)

    async def _deny(self, request: Request) -> Response:
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        session, fields = form
        preview_id, reason = fields.get("preview_id", ""), fields.get("reason", "")
        try:
            await off_loop(partial(self.approver.deny, preview_id, reason=reason))
        except (ToolError, LedgerError) as exc:
            return self._back(session, "error", _failed(exc))
        return self._back(session, "notice", f"denied {preview_id}: {reason[:200]}")

    async def _deny_batch(self, request: Request) -> Response:
        """Deny every item of a batch that still waits; items decided meanwhile stay so."""
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        session, fields = form
        batch_id, reason = fields.get("batch_id", ""), fields.get("reason", "")
        denied = 0
        try:
            items = await off_loop(
                partial(batch_items, self.approver.ledger, batch_id, now=self.clock())
            )
            for item in items:
                if item.state != "waiting":
                    continue
                try:
                    await off_loop(partial(self.approver.deny, item.preview_id, reason=reason))
                except ConflictError:
                    continue  # approved or expired since it was read: stays as it is
                denied += 1
        except (ToolError, LedgerError) as exc:
            text = _failed(exc) + (f" ({denied} denied before)" if denied else "")
            return self._back(session, "error", text)
        note = f"denied {denied} waiting item(s) of batch {batch_id}: {reason[:200]}"
        return self._back(session, "notice", note)

    # -- what an approval that failed left behind -----------------------------------------

    async def _failed_after(self, exc: ToolError | LedgerError, before: Sequence[str]) -> str:
        """``exc`` as the page says it, and which approvals stand all the same."""
        text = _failed(exc)
        stands = await off_loop(partial(approved_now, self.approver, before))
        if stands:
            which = ", ".join(stands) if len(stands) <= 3 else f"{len(stands)} items"
            text += f"; your approval of {which} stands: the page shows where each is now"
        return text

    def _back(self, session: str, kind: str, text: str) -> Response:
        self._sessions.tell(session, kind, text)
        return RedirectResponse(self.base, status_code=303, headers=_HEADERS)


def _cookie_values(request: Request, name: str) -> list[str]:
    """Every non-empty value the request's Cookie headers give ``name``, in order."""
    values = []
    for header in request.headers.getlist("cookie"):
        for pair in header.split(";"):
            key, eq, value = pair.partition("=")
            if eq and key.strip() == name and value.strip():
                values.append(value.strip())
    return values


def _not_from_the_page(request: Request) -> str | None:
    """Why a post does not come from the page itself, or ``None`` when it does.

    Browsers send Origin with every post; a post without one (and without fetch metadata
    saying it is the page's) comes from something that is not a browser on the page."""
    origin = request.headers.get("origin")
    site = request.headers.get("sec-fetch-site")
    if origin is not None and origin != f"http://{request.headers.get('host', '')}":
        return f"a form posted from {origin[:100]!r} is not this page's"
    if site is not None and site != "same-origin":
        return f"a form posted from another site ({site[:20]!r}) is not this page's"
    if origin is None and site is None:
        return "a post without an Origin header is not this page's form"
    return None


async def _elsewhere(request: Request) -> Response:
    return _page(404, "not here", "open the link `airlock approvals serve` printed")


def _failed(exc: ToolError | LedgerError) -> str:
    """An error as the page says it: its code and message, and whether to try again."""
    again = " (try again in a moment)" if isinstance(exc, LedgerError) and exc.retryable else ""
    return f"{exc.code}: {exc.message}{again}"


def _page(status: int, title: str, message: str, *, close: bool = False) -> Response:
    # A client that stopped mid-request gets the connection closed, not kept for another.
    headers = {**_HEADERS, "Connection": "close"} if close else _HEADERS
    return HTMLResponse(render_refusal(title, message), status_code=status, headers=headers)


def serve_page(page: ApprovalPage, *, port: int) -> None:
    """Serve ``page`` on ``127.0.0.1:port`` until interrupted."""
    page_server(page.app(), host=LOOPBACK, port=port).run()
