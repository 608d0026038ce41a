"""The policies an approver that commits judges each write by (``--policy`` with
``approvals approve --commit`` and ``approvals serve --registry``): they allow what the test
worlds prepare, as the grants their sessions held."""

from __future__ import annotations

from pathlib import Path

from airlock.policies import Policy, parse_policy

REFUNDS = """version = 1
[principals.alice]
tenant = "acme"
scopes = ["billing.write"]
effects = ["write(billing:refund/*)"]
spend_limits = { USD = 100000 }
propose = ["billing_refund_create"]

[[principals.alice.rules]]
id = "refunds-ask"
action = "ask"
tools = ["billing_*"]
"""
"""Alice's refunds of :mod:`tests.tools.test_write_world` (its ``GRANT`` and ``ASK``)."""

PAYMENTS = """version = 1
[principals.alice]
tenant = "acme"
scopes = ["bank.write"]
effects = ["write(bank:**)"]
propose = ["bank_payment_create"]

[[principals.alice.rules]]
id = "pay-ask"
action = "ask"
tools = ["bank_*"]
"""
"""Alice's payments of :mod:`tests.airlock.cli.test_approver`."""


def policy(text: str = REFUNDS, *, self_approval: bool = False) -> Policy:
    """``text`` as a loaded policy (with ``self_approval = true`` when asked)."""
    head = "self_approval = true\n" if self_approval else ""
    return parse_policy(text.replace("version = 1\n", f"version = 1\n{head}", 1), source="test")


def policy_file(root: Path, text: str = REFUNDS) -> str:
    """``text`` written to ``root/commit-policy.toml``; its path, for ``--policy``."""
    path = root / "commit-policy.toml"
    path.write_text(text)
    return str(path)
