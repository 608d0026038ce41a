"""Audit records for tests of the stores, queries and commands that read them."""

from __future__ import annotations

import time
from typing import Any

from airlock.tools import AuditEvent


def stored_event(**fields: Any) -> AuditEvent:
    """A final ``ok`` record of alice's direct ``billing_invoice_get``, with ``fields`` over it."""
    defaults: dict[str, Any] = {
        "ts": time.time(),
        "run_id": "r1",
        "call_id": "c1",
        "caller": "direct",
        "tool": "billing_invoice_get",
        "user_id": "alice",
        "tenant_id": "acme",
        "args_hash": "0" * 32,
        "stage": "done",
        "decision": "allow",
        "rule": "default",
        "outcome": "ok",
        "code": None,
        "duration_s": 0.001,
        "effects": ("read(billing:invoice/inv_1)",),
    }
    return AuditEvent(**(defaults | fields))
