"""A small billing registry shared by the tool tests: one tool per admission case."""

from __future__ import annotations

import time
from typing import Annotated

import anyio
from pydantic import BaseModel, Field

from airlock.policies import Grant, Principal, network, read, write
from airlock.tools import (
    AuditLog,
    CallContext,
    MemoryAuditStore,
    NotFoundError,
    Observations,
    Registry,
    requires,
)

InvoiceId = Annotated[
    str, Field(pattern=r"^inv_[a-z0-9]{1,32}$", max_length=36, description="Invoice id, inv_...")
]
OrderId = Annotated[str, Field(pattern=r"^ord_[a-z0-9]{1,32}$", max_length=36)]

INVOICES = {
    "inv_1": {"invoice_id": "inv_1", "tenant_id": "acme", "amount_minor": 1200, "note": "x"},
    "inv_2": {"invoice_id": "inv_2", "tenant_id": "acme", "amount_minor": 50, "note": "y"},
    "inv_9": {"invoice_id": "inv_9", "tenant_id": "globex", "amount_minor": 7, "note": "z"},
}


class Invoice(BaseModel):
    """What a model may see of an invoice (the note and the tenant stay behind)."""

    invoice_id: str
    amount_minor: int


class Blob(BaseModel):
    data: str


class Status(BaseModel):
    order_id: str
    status: str


class Handled:
    """Counts calls that reached a handler, by tool."""

    def __init__(self) -> None:
        self.calls: list[str] = []


def build_registry(handled: Handled, *, audit: AuditLog | None = None) -> Registry:
    registry = Registry(audit=audit or AuditLog(MemoryAuditStore()))

    @registry.tool(
        effects=[read("billing:invoice/{invoice_id}")],
        scope="billing.read",
        callers={"direct", "code"},
        timeout=2.0,
    )
    async def billing_invoice_get(ctx: CallContext, invoice_id: InvoiceId) -> Invoice:
        """Fetch one invoice by id. Use it to check an amount before acting on it.
        It does not return notes or payment details."""
        handled.calls.append("billing_invoice_get")
        record = INVOICES.get(invoice_id)
        if record is None:
            raise NotFoundError(detail=f"no invoice {invoice_id}")
        ctx.ensure_tenant(str(record["tenant_id"]))
        return Invoice.model_validate(record)

    @registry.tool(
        effects=[read("billing:invoice/*")],
        scope="billing.admin",
        callers={"direct", "code"},
        output=Invoice,
    )
    def billing_invoice_audit(invoice_id: InvoiceId) -> dict[str, object]:
        """Read an invoice with administrative detail. Use it only for audits.
        It does not return payment details."""
        handled.calls.append("billing_invoice_audit")
        return dict(INVOICES[invoice_id])

    @registry.tool(effects=[write("billing:invoice/{invoice_id}")], scope="billing.read")
    async def billing_invoice_void(invoice_id: InvoiceId) -> Invoice:
        """Void an invoice. Use it when a customer was billed by mistake.
        It does not refund payments."""
        handled.calls.append("billing_invoice_void")
        return Invoice.model_validate(INVOICES[invoice_id])

    @registry.tool(
        effects=[read("billing:export/{size}")],
        scope="billing.read",
        callers={"direct", "code"},
        max_result_bytes=1_000,
    )
    def billing_export_make(size: Annotated[int, Field(ge=0, le=10_000_000)]) -> Blob:
        """Make an export of a given size. Use it to test limits.
        It does not store anything."""
        handled.calls.append("billing_export_make")
        return Blob(data="x" * size)

    @registry.tool(
        effects=[read("billing:slow/{seconds}")],
        scope="billing.read",
        callers={"direct", "code"},
        timeout=0.05,
    )
    async def billing_slow_wait(seconds: Annotated[int, Field(ge=0, le=10)]) -> Blob:
        """Wait a number of seconds. Use it to test deadlines.
        It does not return anything useful."""
        handled.calls.append("billing_slow_wait")
        await anyio.sleep(seconds)
        return Blob(data="late")

    @registry.tool(
        effects=[read("billing:broken/{n}")],
        scope="billing.read",
        callers={"direct", "code"},
    )
    def billing_broken_get(n: Annotated[int, Field(ge=0, le=9)]) -> Blob:
        """Fail in the way a buggy handler does. Use it to test failures.
        It does not return."""
        handled.calls.append("billing_broken_get")
        raise RuntimeError(f"database password in a traceback {n}")

    @registry.tool(
        effects=[read("orders:order/{order_id}"), network("api.orders.example")],
        scope="orders.read",
        callers={"direct", "code"},
    )
    async def orders_status_get(order_id: OrderId) -> Status:
        """Look up the status of an order. Use it before changing an order.
        It does not return the order's items."""
        handled.calls.append("orders_status_get")
        return Status(order_id=order_id, status="open")

    @registry.tool(
        effects=[read("orders:order/{order_id}")],
        scope="orders.read",
        callers={"direct", "code"},
        requires=[requires("orders_status_get", "order_id")],
    )
    async def orders_order_inspect(order_id: OrderId) -> Status:
        """Inspect an order closely. Use it after looking up its status.
        It does not change the order."""
        handled.calls.append("orders_order_inspect")
        return Status(order_id=order_id, status="inspected")

    return registry


ALICE = Principal(
    user_id="alice",
    tenant_id="acme",
    scopes=frozenset({"billing.read", "orders.read"}),
)
FULL_GRANT = Grant(
    scopes=frozenset({"billing.read", "orders.read", "billing.admin"}),
    effects=(
        read("billing:**"),
        write("billing:invoice/*"),
        read("orders:order/*"),
        network("api.orders.example"),
    ),
)


def context(
    *,
    principal: Principal = ALICE,
    grant: Grant = FULL_GRANT,
    caller: str = "direct",
    run_id: str = "run_1",
    call_id: str = "call_1",
    budget: float = 60.0,
    observations: Observations | None = None,
) -> CallContext:
    return CallContext(
        principal=principal,
        grant=grant,
        run_id=run_id,
        call_id=call_id,
        caller=caller,  # type: ignore[arg-type]
        deadline=time.monotonic() + budget,
        observations=observations,
    )
