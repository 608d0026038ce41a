"""A billing-like registry for the inventory's tests and golden outputs.

Two billing reads callable from code, a refund that writes and spends (direct only, through
approval, once the invoice was read), a page fetch whose network reach is broader than its scope suggests, and a CRM
read that only some principals see. The billing tools run on :class:`RestRoute`, a stand-in
for the REST adapter: it exposes the hosts it reaches and the *names* of its credentials the
way an adapter is expected to, so the inventory reads them without knowing the class.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from airlock.policies import network, read, spend, write
from airlock.tools import Registry, ToolSpec, requires

POLICY = Path(__file__).with_name("inventory_policy.toml")
CREDENTIAL = "BILLING_API_KEY"

InvoiceId = Annotated[str, Field(pattern=r"^inv_[a-z0-9]{1,32}$", max_length=36)]


@dataclass(frozen=True)
class RestRoute:
    """One HTTP route of an upstream API; reads its credential from the environment per call."""

    method: str
    url: str
    credentials: tuple[str, ...] = ()
    idempotency: str | None = None

    @property
    def destinations(self) -> tuple[str, ...]:
        return (urlsplit(self.url).hostname or "",)

    async def __call__(self, **args: Any) -> dict[str, Any]:
        token = os.environ.get(self.credentials[0], "") if self.credentials else ""
        return {"route": f"{self.method} {self.url}", "authorized": bool(token), **args}


class InvoiceGetInput(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    invoice_id: InvoiceId


class InvoiceListInput(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    customer_id: Annotated[str, Field(pattern=r"^cus_[a-z0-9]{1,32}$", max_length=36)]


class RefundInput(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    invoice_id: InvoiceId
    amount_minor: Annotated[int, Field(ge=1, le=10_000_000)]


class Invoice(BaseModel):
    invoice_id: str = ""
    amount_minor: int = 0


class Receipt(BaseModel):
    refund_id: str = ""


class Page(BaseModel):
    text: str = ""


class Customer(BaseModel):
    customer_id: str = ""


def build_registry() -> Registry:
    registry = Registry()
    billing = "https://api.billing.example/v1"
    registry.register(
        ToolSpec(
            name="billing_invoice_get",
            description=(
                "Fetch one invoice by id. Use it to check an amount before acting on it. "
                "It does not return payment details."
            ),
            handler=RestRoute("GET", f"{billing}/invoices/{{invoice_id}}", (CREDENTIAL,)),
            input_model=InvoiceGetInput,
            output_model=Invoice,
            effects=(read("billing:invoice/{invoice_id}"), network("api.billing.example")),
            callers=frozenset({"direct", "code"}),
            scope="billing.read",
        )
    )
    registry.register(
        ToolSpec(
            name="billing_invoice_list",
            description=(
                "List a customer's invoices. Use it to find invoices to look at. "
                "It does not return line items."
            ),
            handler=RestRoute("GET", f"{billing}/invoices", (CREDENTIAL,)),
            input_model=InvoiceListInput,
            output_model=Invoice,
            effects=(read("billing:invoice/*"), network("api.billing.example")),
            callers=frozenset({"direct", "code"}),
            scope="billing.read",
        )
    )
    registry.register(
        ToolSpec(
            name="billing_refund_create",
            description=(
                "Refund part of an invoice. Use it when a customer was overcharged. "
                "It does not cancel the invoice."
            ),
            handler=RestRoute("POST", f"{billing}/refunds", (CREDENTIAL,), idempotency="keyed"),
            input_model=RefundInput,
            output_model=Receipt,
            effects=(
                write("billing:refund/{invoice_id}"),
                spend("{amount_minor}", currency="USD"),
                network("api.billing.example"),
            ),
            callers=frozenset({"direct"}),
            scope="billing.write",
            reversible=False,
            preconditions=(requires("billing_invoice_get", "invoice_id"),),
        )
    )

    @registry.tool(
        effects=[
            read("web:page/*"),
            network("docs.example.com"),
            network("*.cdn.example.net"),
        ],
        scope="web.read",
        callers={"direct", "code"},
    )
    def web_page_fetch(
        path: Annotated[str, Field(pattern=r"^/[a-z0-9/_-]{0,200}$", max_length=201)],
    ) -> Page:
        """Fetch a documentation page. Use it to quote the docs. It does not run scripts."""
        return Page(text=path)

    @registry.tool(
        effects=[read("crm:customer/{customer_id}")],
        scope="crm.read",
        callers={"direct", "code"},
    )
    def crm_customer_get(
        customer_id: Annotated[str, Field(pattern=r"^cus_[a-z0-9]{1,32}$", max_length=36)],
    ) -> Customer:
        """Look up a customer. Use it to find who owns an invoice. It does not return cards."""
        return Customer(customer_id=customer_id)

    return registry


registry = build_registry()


REGISTRY_REF = "tests.airlock.inventory_registry:registry"
REPO = Path(__file__).resolve().parents[2]
POLICY_ARG = "tests/airlock/inventory_policy.toml"
"""The policy as the golden files name it: relative to the repository root."""
