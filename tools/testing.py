"""Fakes for testing the write path: a system of record that honours Idempotency-Key, and
a refund tool that writes to it.

:class:`SystemOfRecord` keeps its state in SQLite, so processes that open the same file see
one system (a crash test kills one of them; a concurrency test commits from many). It
counts every send it receives as well as every effect it applies, so a test can tell "sent
once" from "sent twice, applied once". Faults are injected per instance: lose the reply
after committing, fail before committing, or run a hook between commit and reply.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from airlock.policies import Principal, spend, write
from airlock.tools._amounts import format_amount
from airlock.tools._errors import ConflictError, NotFoundError
from airlock.tools._json import JSONObject
from airlock.tools._preview import canonical_json
from airlock.tools._spec import ToolSpec
from airlock.tools._write_tool import write_tool

__all__ = [
    "Refund",
    "RefundArgs",
    "RefundReceipt",
    "SystemOfRecord",
    "refund_tool",
]

Fault = Literal["lose_reply", "fail_before"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS idempotency (
    key TEXT PRIMARY KEY, request TEXT NOT NULL, response TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS effects (
    id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, request TEXT NOT NULL, at REAL
);
CREATE TABLE IF NOT EXISTS sends (
    id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, pid INTEGER NOT NULL, at REAL
);
"""


class SystemOfRecord:
    """A fake payment system: ``send(key, request)`` applies a request once per key.

    A second send with the same key returns the first response unchanged (the request must
    be the same, or it is a ``conflict``, as real APIs answer). ``query(key)`` returns the
    stored response, for reconciliation.

    Args:
        path: SQLite file shared by every process that opens it; ``":memory:"`` for one.
        latency: seconds each send waits after committing, before it replies.
        prefix: prefix of the ids it assigns (``re_1``, ``re_2``...).
    """

    def __init__(self, path: str | Path = ":memory:", *, latency: float = 0.0, prefix: str = "re"):
        self.path = str(path)
        self.latency = latency
        self.prefix = prefix
        self.after_commit: Callable[[str], None] | None = None
        """Called with the key after the system committed, before it replies."""
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            self.path, timeout=30.0, check_same_thread=False, isolation_level=None
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.executescript(_SCHEMA)

    def inject(self, fault: Fault, times: int = 1) -> None:
        """Make the next ``times`` sends misbehave: ``lose_reply`` commits and then raises
        ``TimeoutError``; ``fail_before`` raises ``TimeoutError`` without committing."""
        self._faults.extend([fault] * times)

    def clear_faults(self) -> None:
        """Forget the faults injected and not yet used."""
        self._faults.clear()

    def send(self, key: str, request: Mapping[str, Any]) -> JSONObject:
        """Apply ``request`` once for ``key`` and return the response.

        Raises:
            TimeoutError: an injected fault (the reply, or the request, was lost).
            ConflictError: ``key`` was used before with a different request.
        """
        body = canonical_json(dict(request)).decode()
        fault = self._faults.popleft() if self._faults else None
        with self._lock:
            self._conn.execute(
                "INSERT INTO sends (key, pid, at) VALUES (?, ?, ?)", (key, os.getpid(), time.time())
            )
        if fault == "fail_before":
            raise TimeoutError("the request was lost before it arrived")
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute(
                    "SELECT request, response FROM idempotency WHERE key = ?", (key,)
                ).fetchone()
                if row is None:
                    cursor = self._conn.execute(
                        "INSERT INTO effects (key, request, at) VALUES (?, ?, ?)",
                        (key, body, time.time()),
                    )
                    response: JSONObject = {
                        "id": f"{self.prefix}_{cursor.lastrowid}",
                        "status": "succeeded",
                    }
                    response.update(json.loads(body))
                    self._conn.execute(
                        "INSERT INTO idempotency (key, request, response) VALUES (?, ?, ?)",
                        (key, body, json.dumps(response)),
                    )
                elif row[0] != body:
                    raise ConflictError(
                        "this idempotency key was used with another request",
                        detail=f"key {key}",
                    )
                else:
                    response = json.loads(row[1])
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
        if self.after_commit is not None:
            self.after_commit(key)
        if self.latency:
            time.sleep(self.latency)
        if fault == "lose_reply":
            raise TimeoutError("the system committed but its reply was lost")
        result: JSONObject = response
        return result

    def query(self, key: str) -> JSONObject | None:
        """The response stored for ``key``, or ``None`` when the key never committed."""
        with self._lock:
            row = self._conn.execute(
                "SELECT response FROM idempotency WHERE key = ?", (key,)
            ).fetchone()
        if row is None:
            return None
        found: JSONObject = json.loads(row[0])
        return found

    def effects(self, key: str | None = None) -> int:
        """How many effects were applied (for one key, or in all)."""
        return self._count("effects", key)

    def sends(self, key: str | None = None) -> int:
        """How many sends arrived (for one key, or in all), including repeats and faults."""
        return self._count("sends", key)

    def effect_keys(self) -> list[str]:
        """The key of every applied effect, in order."""
        with self._lock:
            rows = self._conn.execute("SELECT key FROM effects ORDER BY id").fetchall()
        return [str(r[0]) for r in rows]

    def _count(self, table: str, key: str | None) -> int:
        sql = f"SELECT COUNT(*) FROM {table}" + (" WHERE key = ?" if key is not None else "")
        with self._lock:
            row = self._conn.execute(sql, () if key is None else (key,)).fetchone()
        return int(row[0])

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()


InvoiceId = Annotated[str, Field(pattern=r"^inv_[a-z0-9]{1,32}$", max_length=36)]


class RefundArgs(BaseModel):
    """What the model fills in: which invoice, and why. Never the amount."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    invoice_id: InvoiceId = Field(description="The invoice to refund in full, inv_...")
    reason: Literal["duplicate", "fraudulent", "requested_by_customer"] = Field(
        description="Why the customer is refunded."
    )


class Refund(BaseModel):
    """The exact effect, computed from the invoice record."""

    model_config = ConfigDict(frozen=True)

    invoice_id: str
    amount_minor: int
    currency: str
    recipient: str
    reason: str


class RefundReceipt(BaseModel):
    """What the system of record answers, as far as the model may see it."""

    id: str
    status: str
    invoice_id: str
    amount_minor: int
    currency: str


def refund_tool(
    system: SystemOfRecord,
    invoices: Mapping[str, Mapping[str, Any]],
    *,
    name: str = "billing_refund_create",
    with_lookup: bool = True,
    timeout: float = 5.0,
    proposable: bool = False,
) -> ToolSpec:
    """A refund write tool over ``system``; ``invoices`` maps ids to records with
    ``tenant_id``, ``amount_minor``, ``currency`` and ``customer``; a refund spends its
    amount in the invoice's currency (``spend("{amount_minor}", currency="{currency}")``).

    ``with_lookup`` decides whether reconciliation queries the system or resends;
    ``proposable`` whether programs may propose it from code.
    """

    def prepare(args: RefundArgs, principal: Principal) -> Refund:
        record = invoices.get(args.invoice_id)
        if record is None or record["tenant_id"] != principal.tenant_id:
            raise NotFoundError(detail=f"no invoice {args.invoice_id} for {principal.tenant_id}")
        return Refund(
            invoice_id=args.invoice_id,
            amount_minor=int(record["amount_minor"]),
            currency=str(record["currency"]),
            recipient=str(record["customer"]),
            reason=args.reason,
        )

    def commit(effect: Refund, idempotency_key: str) -> JSONObject:
        return system.send(idempotency_key, effect.model_dump(mode="json"))

    def lookup(effect: Refund, idempotency_key: str) -> JSONObject | None:
        return system.query(idempotency_key)

    return write_tool(
        name=name,
        description=(
            "Refund an invoice in full to the customer who paid it. Use it when a customer "
            "was charged twice or by mistake; the amount comes from the invoice. It does not "
            "return card details, and the refund waits for approval before it is sent."
        ),
        input_model=RefundArgs,
        effect_model=Refund,
        receipt_model=RefundReceipt,
        prepare=prepare,
        commit=commit,
        lookup=lookup if with_lookup else None,
        effects=[
            write("billing:refund/{invoice_id}"),
            spend("{amount_minor}", currency="{currency}"),
        ],
        scope="billing.write",
        intent=("invoice_id",),
        summarize=lambda e: (
            f"refund {format_amount(e.amount_minor, e.currency)} on {e.invoice_id} to {e.recipient}"
        ),
        timeout=timeout,
        proposable=proposable,
    )
