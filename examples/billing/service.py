"""The billing service: a small JSON API over :class:`BillingStore`, as a Starlette app.

Routes (every one but ``/_admin`` needs ``Authorization: Bearer <tenant token>``; a record of
another tenant answers 404, exactly like a missing one)::

    GET  /v1/invoices?limit=&cursor=&status=   a page: {"data": [...], "next_cursor": ...}
    GET  /v1/invoices/{invoice_id}             one invoice, with customer and payments
    POST /v1/refunds                           refund one payment (Idempotency-Key)
    GET  /v1/refunds?invoice_id=&idempotency_key=   refunds of the tenant (reconciliation
                                               asks whether a key committed)
    POST /_admin/faults, DELETE /_admin/faults arm or clear fault switches (admin token)

A request body over :data:`MAX_BODY_BYTES` (64 KiB) is **413** ``body_too_large``, refused by
its ``Content-Length`` before it is read; one that is not JSON, or is nested too deep to parse,
is **400** ``invalid_json``.

Like a real API it answers more than a tool should pass on: card brand and last digits,
billing addresses, e-mail and internal notes. The tools' output models drop them.

``Idempotency-Key`` on ``POST /v1/refunds`` follows the IETF draft
(draft-ietf-httpapi-idempotency-key-header) and Stripe:

- the first request with a key claims it (in flight), runs, and stores its answer, success
  or refusal, in the same transaction as the refund itself;
- the same key with the same body (compared as canonical JSON) replays the stored answer,
  with ``Idempotent-Replayed: true``;
- the same key with a different body is **422** ``idempotency_key_reused`` (the draft's
  answer for a reused key: the request cannot be processed as sent);
- a request while the first with that key is still in flight is **409**
  ``idempotency_key_in_use``;
- a server failure (5xx) releases the key, since nothing was committed under it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any, Final, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from airlock import requires_extra
from examples.billing.faults import Faults, FaultSpec
from examples.billing.store import BillingStore, RefundRefused, StoredAnswer

with requires_extra("demo", feature="the billing example's service"):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["MAX_BODY_BYTES", "RefundRequest", "billing_app"]

MAX_BODY_BYTES: Final = 65_536
"""The largest request body read; a larger one is 413 ``body_too_large``, refused by its
``Content-Length`` before it is read, or as soon as the stream passes it."""
_INVOICE_ID = re.compile(r"^inv_[a-z0-9]{1,32}$")
_MAX_KEY = 255
_MAX_PAGE = 100


class RefundRequest(BaseModel):
    """The body of ``POST /v1/refunds``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    invoice_id: str = Field(pattern=r"^inv_[a-z0-9]{1,32}$")
    payment_id: str = Field(pattern=r"^pay_[a-z0-9]{1,32}$")
    amount_minor: int = Field(gt=0, le=100_000_000)
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    reason: Literal["duplicate", "fraudulent", "requested_by_customer"]


def _error(status: int, kind: str, message: str, **headers: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"type": kind, "message": message}}, status_code=status, headers=headers
    )


class _BodyTooLarge(Exception):
    """The request's body is over :data:`MAX_BODY_BYTES`."""


async def _body(request: Request) -> bytes:
    """The request's body, read no further than :data:`MAX_BODY_BYTES`.

    Raises:
        _BodyTooLarge: its ``Content-Length`` or what was read passes the cap.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _BodyTooLarge
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_BODY_BYTES:  # a body without a length, or longer than it said
            raise _BodyTooLarge
    return bytes(data)


def _too_large() -> JSONResponse:
    return _error(413, "body_too_large", f"the body must be at most {MAX_BODY_BYTES} bytes")


def billing_app(store: BillingStore, faults: Faults, *, admin_token: str) -> Starlette:
    """The service's ASGI app over ``store``, with ``faults`` armed by the host."""

    def tenant_of(request: Request) -> str | None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        return store.tenant_for_token(token.strip())

    def answer(request: Request, body: dict[str, Any], status: int = 200) -> JSONResponse:
        spec = faults.take("oversize", request.method, request.url.path)
        if spec is not None:
            body = {**body, "padding": "x" * spec.size_bytes}
        return JSONResponse(body, status_code=status)

    async def list_invoices(request: Request) -> Response:
        tenant = tenant_of(request)
        if tenant is None:
            return _error(401, "unauthorized", "a valid bearer token is required")
        query = request.query_params
        try:
            limit = int(query.get("limit", "25"))
        except ValueError:
            return _error(400, "invalid_limit", "limit must be an integer")
        status = query.get("status")
        if not 1 <= limit <= _MAX_PAGE or status not in (None, "paid", "open", "void"):
            return _error(400, "invalid_query", f"limit is 1-{_MAX_PAGE}; status paid|open|void")
        rows = store.invoices(tenant, after=query.get("cursor"), limit=limit + 1, status=status)
        more = len(rows) > limit
        rows = rows[:limit]
        return answer(
            request, {"data": rows, "next_cursor": rows[-1]["id"] if more and rows else None}
        )

    async def get_invoice(request: Request) -> Response:
        tenant = tenant_of(request)
        if tenant is None:
            return _error(401, "unauthorized", "a valid bearer token is required")
        invoice_id = request.path_params["invoice_id"]
        record = store.invoice(tenant, invoice_id) if _INVOICE_ID.match(invoice_id) else None
        if record is None:
            return _error(404, "not_found", "no such invoice")
        return answer(request, record)

    async def list_refunds(request: Request) -> Response:
        tenant = tenant_of(request)
        if tenant is None:
            return _error(401, "unauthorized", "a valid bearer token is required")
        refunds = store.refunds(
            tenant,
            invoice_id=request.query_params.get("invoice_id"),
            key=request.query_params.get("idempotency_key"),
        )
        return answer(request, {"data": refunds, "next_cursor": None})

    async def create_refund(request: Request) -> Response:
        tenant = tenant_of(request)
        if tenant is None:
            return _error(401, "unauthorized", "a valid bearer token is required")
        key = request.headers.get("idempotency-key")
        if key is not None and not 1 <= len(key) <= _MAX_KEY:
            return _error(400, "invalid_idempotency_key", f"a key is 1-{_MAX_KEY} characters")
        try:
            raw = json.loads(await _body(request))
        except _BodyTooLarge:
            return _too_large()
        except (ValueError, RecursionError):  # nested too deep is not worth a 500
            return _error(400, "invalid_json", "the body must be a JSON object")
        try:
            refund = RefundRequest.model_validate(raw)
        except ValidationError as exc:
            return _error(422, "invalid_request", str(exc.errors(include_url=False))[:500])
        digest = hashlib.sha256(
            json.dumps(refund.model_dump(), sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()
        if key is not None:
            claim = store.claim_key(tenant, key, digest)
            if isinstance(claim, StoredAnswer):
                return JSONResponse(
                    claim.body,
                    status_code=claim.status,
                    headers={"Idempotent-Replayed": "true"},
                )
            if claim == "in_flight":
                return _error(
                    409, "idempotency_key_in_use", "a request with this key is in progress"
                )
            if claim == "mismatch":
                return _error(
                    422,
                    "idempotency_key_reused",
                    "this key was used with a different request; use a new key for it",
                )
        try:
            spec = faults.take("delay", request.method, request.url.path, phase="commit")
            if spec is not None:
                await anyio.sleep(spec.seconds)
            body = store.create_refund(tenant, key=key, **refund.model_dump())
        except RefundRefused as refused:
            return _error(refused.status, refused.kind, refused.message)
        except BaseException:
            if key is not None:
                store.release_key(tenant, key)
            raise
        if faults.take("drop_after_commit", request.method, request.url.path) is not None:
            return _CutOff(body)
        return answer(request, body)

    async def admin_faults(request: Request) -> Response:
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), admin_token.encode()):
            return _error(401, "unauthorized", "the admin token is required")
        if request.method == "DELETE":
            faults.clear()
            return JSONResponse({"cleared": True})
        try:
            spec = faults.arm(FaultSpec.model_validate_json(await _body(request)))
        except _BodyTooLarge:
            return _too_large()
        except ValidationError as exc:
            return _error(422, "invalid_fault", str(exc.errors(include_url=False))[:500])
        return JSONResponse(spec.model_dump())

    app = Starlette(
        routes=[
            Route("/v1/invoices", list_invoices, methods=["GET"]),
            Route("/v1/invoices/{invoice_id}", get_invoice, methods=["GET"]),
            Route("/v1/refunds", create_refund, methods=["POST"]),
            Route("/v1/refunds", list_refunds, methods=["GET"]),
            Route("/_admin/faults", admin_faults, methods=["POST", "DELETE"]),
        ]
    )
    app.add_middleware(_FaultGate, faults=faults)
    return app


class _FaultGate:
    """Request-phase faults, before routing: delay, 429, 5xx, redirect."""

    def __init__(self, app: ASGIApp, faults: Faults) -> None:
        self.app = app
        self.faults = faults

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/_admin"):
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        delay = self.faults.take("delay", method, path, phase="request")
        if delay is not None:
            await anyio.sleep(delay.seconds)
        response: Response | None = None
        if (spec := self.faults.take("rate_limit", method, path)) is not None:
            response = _error(
                429, "rate_limited", "too many requests", **{"Retry-After": f"{spec.retry_after:g}"}
            )
        elif (spec := self.faults.take("unavailable", method, path)) is not None:
            response = _error(spec.status, "unavailable", "the service is unavailable")
        elif (spec := self.faults.take("redirect", method, path)) is not None:
            response = Response(status_code=spec.status, headers={"Location": spec.location})
        if response is not None:
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _CutOff(Response):
    """A response that promises a body and stops halfway: the server then closes the
    connection, and the client sees the answer lost after the refund committed."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(status_code=200, media_type="application/json")
        self._payload = json.dumps(body).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(self._payload) * 2).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": self._payload[:1], "more_body": False})
