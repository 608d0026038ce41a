"""The billing service's records in SQLite: tenants, customers, invoices, payments, refunds,
and the idempotency keys of refund requests.

Rules the schema itself enforces (so no code path can break them):

- one refund per payment: ``UNIQUE (payment_id)`` on ``refunds``;
- one stored answer per tenant and key: ``PRIMARY KEY (tenant_id, key)`` on
  ``idempotency_keys``.

Every method is one transaction under one lock; the service is small and SQLite is fast, so
handlers call it directly.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["BillingStore", "KeyClaim", "RefundRefused", "StoredAnswer", "token_digest"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, token_sha256 TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS customers (
    id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL REFERENCES tenants(id),
    name TEXT NOT NULL, email TEXT NOT NULL, address TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS invoices (
    id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL REFERENCES tenants(id),
    customer_id TEXT NOT NULL REFERENCES customers(id), number TEXT NOT NULL,
    amount_minor INTEGER NOT NULL CHECK (amount_minor > 0), currency TEXT NOT NULL,
    status TEXT NOT NULL, issued_at TEXT NOT NULL, internal_note TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS invoices_by_tenant ON invoices (tenant_id, id);
CREATE TABLE IF NOT EXISTS payments (
    id TEXT PRIMARY KEY, invoice_id TEXT NOT NULL REFERENCES invoices(id),
    amount_minor INTEGER NOT NULL, card_brand TEXT NOT NULL, card_last4 TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS refunds (
    id INTEGER PRIMARY KEY AUTOINCREMENT, tenant_id TEXT NOT NULL,
    invoice_id TEXT NOT NULL REFERENCES invoices(id),
    payment_id TEXT NOT NULL UNIQUE REFERENCES payments(id),
    amount_minor INTEGER NOT NULL, currency TEXT NOT NULL, reason TEXT NOT NULL,
    idempotency_key TEXT, created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS idempotency_keys (
    tenant_id TEXT NOT NULL, key TEXT NOT NULL, request_sha256 TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('in_flight', 'done')),
    status INTEGER, response TEXT, created_at REAL NOT NULL,
    PRIMARY KEY (tenant_id, key)
);
"""


def token_digest(token: str) -> str:
    """What the store keeps of a bearer token: its SHA-256, never the token."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class StoredAnswer:
    """The response stored under an idempotency key, replayed for a repeated request."""

    status: int
    body: dict[str, Any]


KeyClaim = Literal["claimed", "in_flight", "mismatch"] | StoredAnswer
"""What claiming a key found: it is ours now, another request holds it, it was used with
another body, or the answer stored for it."""


class RefundRefused(Exception):
    """The refund breaks a rule; ``status`` and ``kind`` are what the service answers."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message


class BillingStore:
    """The service's database. ``path`` is a file, or ``":memory:"`` for one process."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(
            str(path), check_same_thread=False, isolation_level=None, timeout=30.0
        )
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.executescript(_SCHEMA)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``), rolled back on any exception."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- reads ---------------------------------------------------------------------------

    def tenant_for_token(self, token: str) -> str | None:
        """The tenant whose token this is, or ``None``."""
        with self._lock:
            row = self._conn.execute(
                "SELECT id FROM tenants WHERE token_sha256 = ?", (token_digest(token),)
            ).fetchone()
        return None if row is None else str(row["id"])

    def invoice(self, tenant_id: str, invoice_id: str) -> dict[str, Any] | None:
        """The full invoice record (as the service answers it) within ``tenant_id``."""
        with self._lock:
            row = self._conn.execute(
                "SELECT * FROM invoices WHERE id = ? AND tenant_id = ?", (invoice_id, tenant_id)
            ).fetchone()
            return None if row is None else self._expand(row)

    def invoices(
        self, tenant_id: str, *, after: str | None, limit: int, status: str | None
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` invoices of ``tenant_id`` with ids after ``after``, in id order."""
        sql = "SELECT * FROM invoices WHERE tenant_id = ? AND id > ?"
        args: list[Any] = [tenant_id, after or ""]
        if status is not None:
            sql += " AND status = ?"
            args.append(status)
        sql += " ORDER BY id LIMIT ?"
        args.append(limit)
        with self._lock:
            rows = self._conn.execute(sql, args).fetchall()
            return [self._expand(row) for row in rows]

    def refunds(
        self, tenant_id: str, *, invoice_id: str | None = None, key: str | None = None
    ) -> list[dict[str, Any]]:
        """Refunds of ``tenant_id``, of one invoice or made under one idempotency key when
        given, oldest first."""
        sql = "SELECT * FROM refunds WHERE tenant_id = ?"
        args: list[Any] = [tenant_id]
        if invoice_id is not None:
            sql += " AND invoice_id = ?"
            args.append(invoice_id)
        if key is not None:
            sql += " AND idempotency_key = ?"
            args.append(key)
        with self._lock:
            rows = self._conn.execute(sql + " ORDER BY id", args).fetchall()
        return [_refund_json(row) for row in rows]

    def tenant_ids(self) -> list[str]:
        """The tenants this store holds, sorted (none in a new file)."""
        with self._lock:
            rows = self._conn.execute("SELECT id FROM tenants ORDER BY id").fetchall()
        return [str(row["id"]) for row in rows]

    def issue_tokens(self, tokens: dict[str, str]) -> None:
        """Make ``tokens`` (tenant id -> bearer token) the tenants' tokens; the old ones stop
        working. Only their digests are stored.

        Raises:
            KeyError: a tenant is not in the store.
        """
        with self.transaction() as conn:
            for tenant, token in tokens.items():
                changed = conn.execute(
                    "UPDATE tenants SET token_sha256 = ? WHERE id = ?",
                    (token_digest(token), tenant),
                ).rowcount
                if changed != 1:
                    raise KeyError(tenant)

    def count(self, table: Literal["refunds", "invoices", "payments", "idempotency_keys"]) -> int:
        """Rows in ``table`` (tests and the demo use it to show "one refund")."""
        with self._lock:
            return int(self._conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])

    def _expand(self, row: sqlite3.Row) -> dict[str, Any]:
        customer = self._conn.execute(
            "SELECT * FROM customers WHERE id = ?", (row["customer_id"],)
        ).fetchone()
        payments = self._conn.execute(
            "SELECT * FROM payments WHERE invoice_id = ? ORDER BY created_at, id", (row["id"],)
        ).fetchall()
        refunds = self._conn.execute(
            "SELECT * FROM refunds WHERE invoice_id = ? ORDER BY id", (row["id"],)
        ).fetchall()
        return {
            "id": row["id"],
            "object": "invoice",
            "tenant_id": row["tenant_id"],
            "number": row["number"],
            "amount_minor": row["amount_minor"],
            "currency": row["currency"],
            "status": row["status"],
            "issued_at": row["issued_at"],
            "internal_note": row["internal_note"],
            "customer": {
                "id": customer["id"],
                "name": customer["name"],
                "email": customer["email"],
                "billing_address": json.loads(customer["address"]),
            },
            "payments": [
                {
                    "id": p["id"],
                    "amount_minor": p["amount_minor"],
                    "created_at": p["created_at"],
                    "card": {"brand": p["card_brand"], "last4": p["card_last4"]},
                }
                for p in payments
            ],
            "refunds": [_refund_json(r) for r in refunds],
        }

    # -- refunds and idempotency -----------------------------------------------------------

    def claim_key(self, tenant_id: str, key: str, request_sha256: str) -> KeyClaim:
        """Mark ``key`` in flight for this request, or say why it cannot be."""
        with self.transaction() as conn:
            row = conn.execute(
                "SELECT * FROM idempotency_keys WHERE tenant_id = ? AND key = ?", (tenant_id, key)
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO idempotency_keys (tenant_id, key, request_sha256, state, "
                    "created_at) VALUES (?, ?, ?, 'in_flight', ?)",
                    (tenant_id, key, request_sha256, time.time()),
                )
                return "claimed"
        if row["request_sha256"] != request_sha256:
            return "mismatch"
        if row["state"] == "in_flight":
            return "in_flight"
        return StoredAnswer(int(row["status"]), json.loads(row["response"]))

    def release_key(self, tenant_id: str, key: str) -> None:
        """Forget an in-flight key whose request failed on the server's side (a 5xx), so the
        client may retry it; nothing was committed under it."""
        with self.transaction() as conn:
            conn.execute(
                "DELETE FROM idempotency_keys WHERE tenant_id = ? AND key = ? AND state = "
                "'in_flight'",
                (tenant_id, key),
            )

    def create_refund(
        self,
        tenant_id: str,
        *,
        invoice_id: str,
        payment_id: str,
        amount_minor: int,
        currency: str,
        reason: str,
        key: str | None,
    ) -> dict[str, Any]:
        """Refund one payment and, when ``key`` is given, store the answer under it, in one
        transaction: either both happen or neither.

        Raises:
            RefundRefused: no such invoice or payment in the tenant (404), the payment was
                refunded already (409), or the amount or currency do not fit (422). The
                refusal is stored under ``key`` too, so a retry gets the same answer.
        """
        refused: RefundRefused | None = None
        with self.transaction() as conn:
            try:
                body = self._refund_in(
                    conn, tenant_id, invoice_id, payment_id, amount_minor, currency, reason, key
                )
            except RefundRefused as exc:
                refused = exc
                body = {"error": {"type": exc.kind, "message": exc.message}}
            # stored in the same transaction, so the answer and the refund exist together
            self._store_answer(
                conn, tenant_id, key, 200 if refused is None else refused.status, body
            )
        if refused is not None:
            raise refused
        return body

    def _refund_in(
        self,
        conn: sqlite3.Connection,
        tenant_id: str,
        invoice_id: str,
        payment_id: str,
        amount_minor: int,
        currency: str,
        reason: str,
        key: str | None,
    ) -> dict[str, Any]:
        invoice = conn.execute(
            "SELECT * FROM invoices WHERE id = ? AND tenant_id = ?", (invoice_id, tenant_id)
        ).fetchone()
        payment = conn.execute(
            "SELECT * FROM payments WHERE id = ? AND invoice_id = ?", (payment_id, invoice_id)
        ).fetchone()
        if invoice is None or payment is None:
            raise RefundRefused(404, "not_found", "no such invoice or payment")
        if currency != invoice["currency"] or not 0 < amount_minor <= payment["amount_minor"]:
            raise RefundRefused(
                422, "invalid_amount", "amount or currency does not fit the payment"
            )
        try:
            cursor = conn.execute(
                "INSERT INTO refunds (tenant_id, invoice_id, payment_id, amount_minor, currency, "
                "reason, idempotency_key, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    tenant_id,
                    invoice_id,
                    payment_id,
                    amount_minor,
                    currency,
                    reason,
                    key,
                    time.time(),
                ),
            )
        except sqlite3.IntegrityError:
            raise RefundRefused(
                409, "already_refunded", "this payment was refunded already"
            ) from None
        row = conn.execute("SELECT * FROM refunds WHERE id = ?", (cursor.lastrowid,)).fetchone()
        return _refund_json(row)

    @staticmethod
    def _store_answer(
        conn: sqlite3.Connection, tenant_id: str, key: str | None, status: int, body: object
    ) -> None:
        if key is None:
            return
        conn.execute(
            "UPDATE idempotency_keys SET state = 'done', status = ?, response = ? "
            "WHERE tenant_id = ? AND key = ?",
            (status, json.dumps(body), tenant_id, key),
        )


def _refund_json(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": f"re_{row['id']:06d}",
        "object": "refund",
        "invoice_id": row["invoice_id"],
        "payment_id": row["payment_id"],
        "amount_minor": row["amount_minor"],
        "currency": row["currency"],
        "reason": row["reason"],
        "status": "succeeded",
    }
