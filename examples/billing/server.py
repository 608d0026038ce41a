"""Running the billing service on loopback: in a background thread, or as a process.

In-process (tests, the demo)::

    with serve_billing() as billing:
        billing.base_url            # "http://127.0.0.1:<free port>"
        billing.tokens["acme"]      # the bearer token of tenant acme (fresh at each start)
        billing.faults.drop_after_commit()
        billing.store.count("refunds")

As a process: ``python -m examples.billing [--db FILE] [--seed N]`` prints one JSON line
(``base_url``, ``tokens``, ``admin_token``) and serves until interrupted; faults are armed
with ``POST /_admin/faults`` and the admin token. Without ``--db`` its records are in memory:
a restart forgets every refund and idempotency key, and the seed makes the same payments
again, unrefunded.
"""

from __future__ import annotations

import argparse
import json
import secrets
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from airlock import requires_extra
from examples.billing.faults import Faults
from examples.billing.seed import TENANTS, seed_store
from examples.billing.service import billing_app
from examples.billing.store import BillingStore

with requires_extra("demo", feature="the billing example's server"):
    import uvicorn

__all__ = ["BillingServer", "main", "serve_billing"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BillingServer:
    """A running billing service and the host's handles on it."""

    base_url: str
    """``http://127.0.0.1:<port>``; the API lives under ``/v1``."""
    tokens: dict[str, str] = field(repr=False)
    """Bearer token of each tenant, issued at start. Host-side only: never give them to a
    model or a container."""
    admin_token: str = field(repr=False)
    """Token of ``/_admin/faults``."""
    faults: Faults
    """The fault switches; arm them from the host."""
    store: BillingStore
    """The service's database, for checks such as ``store.count("refunds")``."""


@contextmanager
def serve_billing(
    *,
    db_path: str | Path = ":memory:",
    seed: int = 7,
    tenants: Sequence[str] = TENANTS,
    invoices_per_tenant: int = 80,
    startup_timeout: float = 10.0,
    port: int = 0,
) -> Iterator[BillingServer]:
    """Seed a store and serve it on 127.0.0.1 on ``port`` (a free one when 0), in a
    background thread.

    A new file (or ``:memory:``) is seeded; an existing seeded file is served as it is (its
    invoices, payments, refunds and idempotency keys), with fresh tokens issued for the
    tenants it holds (``tenants`` and the seed options then do not apply).

    Raises:
        RuntimeError: the server did not start within ``startup_timeout`` seconds.
    """
    admin_token = "adm_" + secrets.token_urlsafe(24)
    store = BillingStore(db_path)
    existing = store.tenant_ids()
    tokens = {tenant: "tok_" + secrets.token_urlsafe(24) for tenant in existing or tenants}
    if existing:  # served as it is; the tokens it was seeded with were never kept
        store.issue_tokens(tokens)
    else:
        seed_store(store, tokens, seed=seed, invoices_per_tenant=invoices_per_tenant)
    faults = Faults()
    app = billing_app(store, faults, admin_token=admin_token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="critical",  # the "lost response" fault makes uvicorn log an error
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="billing-service", daemon=True
    )
    thread.start()
    started = time.monotonic()
    while not server.started:
        if not thread.is_alive() or time.monotonic() - started > startup_timeout:
            server.should_exit = True
            sock.close()
            store.close()
            raise RuntimeError("the billing service did not start")
        time.sleep(0.01)
    try:
        yield BillingServer(
            base_url=f"http://127.0.0.1:{port}",
            tokens=dict(tokens),
            admin_token=admin_token,
            faults=faults,
            store=store,
        )
    finally:
        server.should_exit = True
        thread.join(timeout=5)
        sock.close()
        store.close()


def main(argv: Sequence[str] | None = None) -> None:
    """Serve until interrupted; print the base URL and tokens as one JSON line first."""
    parser = argparse.ArgumentParser(prog="python -m examples.billing")
    parser.add_argument(
        "--db",
        default=":memory:",
        help="SQLite file (a new one is seeded, an existing one served as it is) or :memory:",
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the generated records")
    parser.add_argument("--port", type=int, default=8400, help="port on 127.0.0.1 (0: a free one)")
    args = parser.parse_args(argv)
    with serve_billing(db_path=args.db, seed=args.seed, port=args.port) as billing:
        print(
            json.dumps(
                {
                    "base_url": billing.base_url,
                    "tokens": billing.tokens,
                    "admin_token": billing.admin_token,
                }
            ),
            flush=True,
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
