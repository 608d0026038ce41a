"""Task-level tools over the billing service: two reads and one refund write.

    billing_invoice_get     read   direct + code   one invoice of the principal's tenant
    billing_invoice_list    read   direct + code   every invoice of the tenant (paginated)
    billing_refund_create   write  direct only     refund one payment; prepare computes it

The tools own what the model must not decide: the tenant's credential (picked from the
principal, never an argument), the amount of a refund (from the record), and what of a
record leaves the host (the output models below are allow-lists; card digits, billing
addresses, e-mails and internal notes are dropped). Transport rules belong to the
:class:`~airlock.tools.RestAdapter`.

Build them with :func:`build_billing_registry` (or :func:`register_billing_tools` on an
existing registry). The registry gets no write path here: the harness attaches one on its
ledger (``WritePath(registry, ledger)``). :func:`demo_registry` is the demo's registry, for
``--registry examples.billing:demo_registry`` with the policy in ``DEMO_POLICY`` (the service
at ``BILLING_URL``, by default ``DEMO_BASE_URL``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from airlock.policies import Principal, read, spend, write
from airlock.tools import (
    AmbiguousWriteError,
    AuditLog,
    CallContext,
    ConflictError,
    Credential,
    DeniedError,
    JSONObject,
    NotFoundError,
    RecordsRead,
    Registry,
    RestAdapter,
    ToolError,
    UpstreamError,
    format_amount,
    write_tool,
)
from examples.billing.seed import TENANTS

__all__ = [
    "BILLING_URL_ENV",
    "DEMO_BASE_URL",
    "DEMO_POLICY",
    "Invoice",
    "InvoiceList",
    "Payment",
    "Refund",
    "RefundArgs",
    "RefundReceipt",
    "build_billing_registry",
    "demo_credentials",
    "demo_registry",
    "register_billing_tools",
]

DEMO_BASE_URL: Final = "http://127.0.0.1:8400"
"""Where the demo registry expects the billing service unless ``BILLING_URL`` says."""
BILLING_URL_ENV: Final = "BILLING_URL"
"""The environment variable :func:`demo_registry` reads the service's base URL from."""
DEMO_POLICY: Final = Path(__file__).with_name("demo_policy.toml")
"""The demo's policy file (packaged): who may read invoices, and when a refund asks a person."""

InvoiceId = Annotated[
    str,
    Field(
        pattern=r"^inv_[a-z0-9]{1,32}$",
        max_length=36,
        description="Invoice id as the billing tools return it, inv_...",
    ),
]
RefundReason = Literal["duplicate", "fraudulent", "requested_by_customer"]
CredentialSource = Mapping[str, Credential] | Callable[[str], Credential | None]
"""Tenant id -> the credential of that tenant's billing account (host-side only). A mapping
declares its credentials' names for the effect inventory; a function declares none, and so
its tools send none (an adapter sends only the credentials it declares): use a mapping."""


class Payment(BaseModel):
    """A payment as the model may see it: no card brand or digits."""

    payment_id: str
    amount_minor: int
    created_at: str
    refunded: bool


class Invoice(BaseModel):
    """An invoice as the model may see it: no customer name, e-mail, address or notes."""

    invoice_id: str
    number: str
    customer_id: str
    amount_minor: int
    currency: str
    status: str
    issued_at: str
    payments: list[Payment]


class InvoiceList(BaseModel):
    """Every invoice of the tenant that matched."""

    invoices: list[Invoice]
    count: int


class RefundArgs(BaseModel):
    """What the model fills in: which invoice, and why. Never the amount."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    invoice_id: InvoiceId
    reason: RefundReason = Field(
        description="duplicate: the customer was charged twice (refunds the extra payment); "
        "fraudulent or requested_by_customer: refunds the invoice's payment."
    )


class Refund(BaseModel):
    """The exact effect, computed from the invoice record by ``prepare``."""

    model_config = ConfigDict(frozen=True)

    tenant_id: str
    invoice_id: str
    payment_id: str
    amount_minor: int
    currency: str
    customer_id: str
    reason: RefundReason


class RefundReceipt(BaseModel):
    """What the service answers for a refund, as far as the model may see it."""

    id: str
    status: str
    invoice_id: str
    payment_id: str
    amount_minor: int
    currency: str


def _invoice(record: Mapping[str, Any]) -> Invoice:
    """The allow-listed view of a service record; a malformed record is ``upstream``."""
    try:
        refunded = {r["payment_id"] for r in record.get("refunds", [])}
        return Invoice(
            invoice_id=record["id"],
            number=record["number"],
            customer_id=record["customer"]["id"],
            amount_minor=record["amount_minor"],
            currency=record["currency"],
            status=record["status"],
            issued_at=record["issued_at"],
            payments=[
                Payment(
                    payment_id=p["id"],
                    amount_minor=p["amount_minor"],
                    created_at=p["created_at"],
                    refunded=p["id"] in refunded,
                )
                for p in record["payments"]
            ],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UpstreamError(detail=f"malformed invoice record: {exc!r}"[:300]) from None


def register_billing_tools(
    registry: Registry, adapter: RestAdapter, credentials: CredentialSource
) -> Registry:
    """Register the three billing tools on ``registry``, calling the service through
    ``adapter`` (whose base URL ends in ``/v1``) with the principal's tenant credential.

    Each tool declares the adapter's destinations and the names of the credentials it may
    send (the adapter's and the mapping's), and, for a mapping, which one each tenant's
    calls send, for the effect inventory.

    Raises:
        UsageError: a tool of the same name is registered already.
    """
    used = tuple(sorted({*adapter.credentials, *_credential_names(credentials)}))
    # Which credential each tenant's calls send: the inventory lists it per principal.
    by_tenant = (
        {tenant: c.name for tenant, c in credentials.items()}
        if isinstance(credentials, Mapping)
        else {}
    )

    def credential_for(tenant_id: str) -> Credential:
        found = credentials(tenant_id) if callable(credentials) else credentials.get(tenant_id)
        if found is None:
            raise DeniedError(
                "billing is not set up for your account; do not retry",
                reason="policy",
                detail=f"no billing credential for tenant {tenant_id!r}",
            )
        return found

    async def fetch(principal: Principal, invoice_id: str, deadline: float) -> JSONObject:
        record = await adapter.get(
            ("invoices", invoice_id),
            credential=credential_for(principal.tenant_id),
            deadline=deadline,
        )
        # The service scopes by token already; checking again costs nothing.
        if record.get("tenant_id") != principal.tenant_id:
            raise NotFoundError(detail=f"invoice {invoice_id} is another tenant's")
        return record

    @registry.tool(
        effects=[read("billing:invoice/{invoice_id}")],
        scope="billing.read",
        callers={"direct", "code"},
        timeout=10.0,
        destinations=adapter.destinations,
        credentials=used,
        tenant_credentials=by_tenant,
    )
    async def billing_invoice_get(ctx: CallContext, invoice_id: InvoiceId) -> Invoice:
        """Fetch one invoice of your account by id, with its payments (id, amount, time,
        whether refunded). Use it to check an invoice before acting on it. It does not
        return card details, the customer's name, e-mail or address, or internal notes."""
        return _invoice(await fetch(ctx.principal, invoice_id, ctx.deadline))

    @registry.tool(
        effects=[read("billing:invoice/*")],
        scope="billing.read",
        callers={"direct", "code"},
        timeout=20.0,
        max_result_bytes=512_000,
        # The audit log records which invoices a listing returned, one read each.
        records=RecordsRead("invoices", read("billing:invoice/{invoice_id}")),
        destinations=adapter.destinations,
        credentials=used,
        tenant_credentials=by_tenant,
    )
    async def billing_invoice_list(
        ctx: CallContext,
        status: Annotated[
            Literal["any", "paid", "open", "void"],
            Field(description="Only invoices in this status; 'any' for all of them."),
        ],
    ) -> InvoiceList:
        """List every invoice of your account, with payments, optionally by status. Use it
        from code to scan many invoices (for example for duplicate payments) and return only
        what matters. It does not return card details, customer contact data or notes."""
        items = await adapter.paginate(
            ("invoices",),
            credential=credential_for(ctx.principal.tenant_id),
            params={"limit": 100, "status": None if status == "any" else status},
            deadline=ctx.deadline,
        )
        invoices = [_invoice(item) for item in items if isinstance(item, dict)]
        return InvoiceList(invoices=invoices, count=len(invoices))

    async def prepare(args: RefundArgs, principal: Principal) -> Refund:
        record = _invoice(await fetch(principal, args.invoice_id, math.inf))
        open_payments = [p for p in record.payments if not p.refunded]
        if args.reason == "duplicate":
            if len(record.payments) < 2:
                raise ConflictError(
                    f"invoice {args.invoice_id} was paid {len(record.payments)} time(s); "
                    "there is no duplicate payment to refund"
                )
            # The first payment settles the invoice; a later one is the duplicate.
            candidates = [p for p in open_payments if p.payment_id != record.payments[0].payment_id]
        else:
            candidates = open_payments
        if not candidates:
            raise ConflictError(f"invoice {args.invoice_id} has no payment left to refund")
        payment = candidates[-1]
        return Refund(
            tenant_id=principal.tenant_id,
            invoice_id=record.invoice_id,
            payment_id=payment.payment_id,
            amount_minor=payment.amount_minor,
            currency=record.currency,
            customer_id=record.customer_id,
            reason=args.reason,
        )

    async def lookup(effect: Refund, idempotency_key: str) -> JSONObject | None:
        page = await adapter.get(
            ("refunds",),
            credential=credential_for(effect.tenant_id),
            params={"idempotency_key": idempotency_key},
        )
        found = page.get("data")
        if isinstance(found, list) and found and isinstance(found[0], dict):
            first: JSONObject = found[0]
            return first
        return None

    async def commit(effect: Refund, idempotency_key: str) -> JSONObject:
        try:
            return await adapter.post(
                ("refunds",),
                credential=credential_for(effect.tenant_id),
                body=effect.model_dump(
                    mode="json",
                    include={"invoice_id", "payment_id", "amount_minor", "currency", "reason"},
                ),
                idempotency_key=idempotency_key,
            )
        except ConflictError as exc:
            # 409 is either "this payment was refunded already" (a definite refusal) or
            # "a request with this key is still in flight" (undecided). The record tells; one
            # that cannot be read tells nothing, and a request in flight may still commit.
            try:
                record = _invoice(
                    await adapter.get(
                        ("invoices", effect.invoice_id),
                        credential=credential_for(effect.tenant_id),
                    )
                )
                refunded = any(
                    p.refunded for p in record.payments if p.payment_id == effect.payment_id
                )
                ours = await lookup(effect, idempotency_key) if refunded else None
            except ToolError as unread:
                raise AmbiguousWriteError(
                    idempotency_key=idempotency_key,
                    detail=f"{exc.detail}; the invoice could not be read ({unread.code})",
                ) from exc
            if not refunded:
                raise AmbiguousWriteError(
                    idempotency_key=idempotency_key, detail=f"key in flight: {exc.detail}"
                ) from exc
            if ours is not None:
                return ours
            raise

    registry.register(
        write_tool(
            name="billing_refund_create",
            description=(
                "Refund one payment of an invoice of your account; the amount and the payment "
                "come from the invoice record, never from you. Use it when a customer was "
                "charged twice (reason 'duplicate') or by mistake. It does not return card "
                "details, and the refund waits for approval before anything is sent."
            ),
            input_model=RefundArgs,
            effect_model=Refund,
            receipt_model=RefundReceipt,
            prepare=prepare,
            commit=commit,
            lookup=lookup,
            effects=[
                write("billing:refund/{invoice_id}"),
                # In the invoice's currency, as prepare computes it: the grant's limit and
                # the rules judge what is spent, never a currency declared in its place.
                spend("{amount_minor}", currency="{currency}"),
            ],
            scope="billing.write",
            intent=("invoice_id", "reason"),
            summarize=lambda e: (
                f"refund {format_amount(e.amount_minor, e.currency)} of payment {e.payment_id} "
                f"on {e.invoice_id} to customer {e.customer_id} ({e.reason})"
            ),
            timeout=10.0,
            destinations=adapter.destinations,
            credentials=used,
            tenant_credentials=by_tenant,
            # A program that finds duplicate payments may propose their refunds as one batch.
            proposable=True,
        )
    )
    return registry


def build_billing_registry(
    base_url: str,
    credentials: CredentialSource,
    *,
    audit: AuditLog | None = None,
    timeout: float = 5.0,
    max_response_bytes: int = 2_000_000,
) -> Registry:
    """A registry holding the three billing tools over the service at ``base_url``
    (``http://127.0.0.1:<port>``, as :func:`~examples.billing.server.serve_billing` gives).

    ``credentials`` maps a tenant id to its :class:`~airlock.tools.Credential` (a mapping or a
    function); a principal of another tenant is ``denied``. A mapping's credential names
    are declared on the adapter (the inventory lists them, and the adapter sends no other).
    ``timeout`` bounds each HTTP attempt. Attach the write path on a ledger (the harness
    does) before a refund can be committed.
    """
    adapter = RestAdapter(
        base_url.rstrip("/") + "/v1",
        timeout=timeout,
        max_response_bytes=max_response_bytes,
        credentials=_credential_names(credentials),
    )
    return register_billing_tools(Registry(audit=audit), adapter, credentials)


def demo_credentials() -> dict[str, Credential]:
    """Each seeded tenant's credential, read from the host environment variable
    ``BILLING_TOKEN_<TENANT>`` at request time (so building needs no value)."""
    return {tenant: Credential.from_env(f"BILLING_TOKEN_{tenant.upper()}") for tenant in TENANTS}


def demo_registry() -> Registry:
    """The demo's registry: the three billing tools over the service at the URL in the
    environment variable ``BILLING_URL`` (unset or empty: :data:`DEMO_BASE_URL`, where
    ``python -m examples.billing`` listens; ``http://127.0.0.1:N`` for ``--port N``), with
    :func:`demo_credentials`. The URL is each tool's network destination, so the inventory
    (and its lock) names the one the registry was built with.

    Loadable as ``--registry examples.billing:demo_registry`` (with ``--policy``
    ``examples/billing/demo_policy.toml``, :data:`DEMO_POLICY`). Building it reads no secret
    and opens no connection; a call needs the service running there and the tenant's
    ``BILLING_TOKEN_<TENANT>`` set.

    Raises:
        ValueError: ``BILLING_URL`` is not ``http(s)://host[:port]``.
    """
    base_url = os.environ.get(BILLING_URL_ENV) or DEMO_BASE_URL
    try:
        return build_billing_registry(base_url, demo_credentials())
    except ValueError:
        raise ValueError(
            f"{BILLING_URL_ENV}={base_url!r} must be http(s)://host[:port]: the base_url "
            "`python -m examples.billing` prints"
        ) from None


def _credential_names(credentials: CredentialSource) -> tuple[str, ...]:
    if isinstance(credentials, Mapping):
        return tuple(sorted({c.name for c in credentials.values()}))
    return ()  # a function: which credentials it can return is not known in advance
