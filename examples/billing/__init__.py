"""A small billing service and the task-level tools that wrap it (the demo's upstream).

From the host::

    from examples.billing import build_billing_registry, serve_billing
    from airlock.tools import Credential, SQLiteLedgerStore, WritePath

    with serve_billing() as billing:                     # 127.0.0.1, a free port, seeded
        credentials = {
            tenant: Credential.from_value(token, name=f"BILLING_TOKEN_{tenant.upper()}")
            for tenant, token in billing.tokens.items()
        }
        registry = build_billing_registry(billing.base_url, credentials)
        writes = WritePath(registry, SQLiteLedgerStore("ledger.db"))  # or let the harness
        billing.faults.drop_after_commit()               # the next refund's answer is lost
        billing.store.count("refunds")                   # what the service holds

The demo's registry, for the CLI, is ``examples.billing:demo_registry`` (the service expected
at ``DEMO_BASE_URL``, each tenant's token in ``BILLING_TOKEN_<TENANT>``), with its policy
``examples/billing/demo_policy.toml`` (``DEMO_POLICY``)::

    airlock inventory --registry examples.billing:demo_registry \
        --policy examples/billing/demo_policy.toml --all

Modules: ``store`` (SQLite records and the idempotency table), ``service`` (the Starlette
app), ``faults`` (fault switches), ``seed`` (deterministic data), ``server`` (running it),
``tools`` (``billing_invoice_get``, ``billing_invoice_list``, ``billing_refund_create``).
"""

from examples.billing.faults import FaultKind, Faults, FaultSpec
from examples.billing.seed import TENANTS
from examples.billing.server import BillingServer, serve_billing
from examples.billing.store import BillingStore
from examples.billing.tools import (
    DEMO_BASE_URL,
    DEMO_POLICY,
    build_billing_registry,
    demo_credentials,
    demo_registry,
    register_billing_tools,
)

__all__ = [
    "DEMO_BASE_URL",
    "DEMO_POLICY",
    "TENANTS",
    "BillingServer",
    "BillingStore",
    "FaultKind",
    "FaultSpec",
    "Faults",
    "build_billing_registry",
    "demo_credentials",
    "demo_registry",
    "register_billing_tools",
    "serve_billing",
]
