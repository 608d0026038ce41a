"""Running a read that a person approved (reconcile ends one a crash interrupted:
:func:`~airlock.tools._reconcile.end_read`).

An approved read is claimed like a commit (``approved`` → ``sending``), run with the
validated arguments its preview holds (sealed values given back from memory), and its shaped
result stored as the receipt in the same transaction that marks the step ``committed``. A
read changes nothing, so one that fails or is interrupted ends ``failed``: asked again, it
gets a new preview.
"""

from __future__ import annotations

import contextlib

from airlock.tools._arguments import validate_arguments
from airlock.tools._context import CallContext
from airlock.tools._errors import PreviewExpiredError, ToolError
from airlock.tools._preview import Preview, Receipt, canonical_json
from airlock.tools._registry import Registry
from airlock.tools._sealed import SecretVault, sealed_fields
from airlock.tools._sender import Sender
from airlock.tools._spec import ToolSpec

__all__ = ["run_claimed_read"]


async def run_claimed_read(
    sender: Sender,
    registry: Registry,
    vault: SecretVault,
    spec: ToolSpec,
    claimed: Preview,
    ctx: CallContext,
) -> Receipt:
    """Run the claimed read once and store its result as the receipt.

    Raises:
        ToolError: the read's own error, ``preview_expired`` when its sealed values are not
            held here; the step is then ``failed``.
    """
    arguments = vault.unseal(claimed.id, claimed.effect, sealed_fields(spec))
    try:
        if arguments is None:
            raise PreviewExpiredError(
                "this call holds a secret that only the process that prepared it had; "
                "call the tool again"
            )
        values = dict(validate_arguments(spec.input_model, canonical_json(arguments)).__dict__)
        raw = await registry.run_approved(spec.name, values, ctx)
    except ToolError as exc:
        sender.mark(claimed, "failed", how=f"read failed: {exc.code}", error=exc.code)
        sender.audit(claimed, "execute", "allow", claimed.rule, exc.outcome, exc.code, exc.detail)
        raise
    except BaseException as exc:
        # A read changes nothing, so an interrupted one is simply over: ask it again.
        with contextlib.suppress(Exception):
            sender.mark(claimed, "failed", how="read interrupted", error="interrupted")
            sender.audit(
                claimed, "execute", "allow", claimed.rule, "error", None, type(exc).__name__
            )
        raise
    return sender.store_receipt(spec, claimed, raw, resolved_by="send", actor="approved read")
