"""Secret fields of a preview: sealed in the ledger, held in memory until the commit.

The ledger keeps a preview's exact effect, but never a value marked
:class:`~airlock.tools.Secret` in clear: such a field (a write's effect-model field, or a
read's input field when a person must approve the read) is stored as a *seal*,
``"secret:" + HMAC-SHA256(key, value)[:16 bytes]``, with a key that lives only in this
process. The approver sees that a secret is there; the fingerprint binds the seal, so the
value the commit sends is the one the preview was made with. The value itself stays in a
:class:`SecretVault` in the memory of the process that prepared the preview, until the step
is settled or expired. A commit or resend in a process that does not hold it cannot send it:
the write path refuses before anything is sent (see :class:`~airlock.tools.WritePath`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from airlock.tools._audit_log import AuditLog
from airlock.tools._json import JSONObject
from airlock.tools._ledger import LedgerStore
from airlock.tools._preview import Preview, Receipt, ResolvedBy
from airlock.tools._secret import Secret
from airlock.tools._sender import Sender
from airlock.tools._spec import ToolSpec

__all__ = ["SEAL_PREFIX", "SealedSender", "SecretVault", "sealed_fields"]

SEAL_PREFIX: Final = "secret:"

_log = logging.getLogger("airlock.writes")


def sealed_fields(spec: ToolSpec) -> frozenset[str]:
    """The fields of ``spec``'s previews that are sealed: a write's effect-model fields
    marked ``Secret()``, a read's secret input fields."""
    if spec.write is None:
        return spec.secret_fields
    model = spec.write.effect_model
    return frozenset(
        name
        for name, info in model.model_fields.items()
        if any(isinstance(m, Secret) for m in info.metadata)
    )


@dataclass
class SecretVault:
    """The clear values of sealed fields, by preview id, held until released or expired."""

    _key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    _held: dict[str, tuple[float, dict[str, str]]] = field(default_factory=dict, repr=False)

    def seal(self, data: JSONObject, fields: frozenset[str]) -> tuple[JSONObject, dict[str, str]]:
        """``data`` with each of ``fields`` replaced by its seal, and the clear values.

        A field whose value is not a string (``None``, absent) is left as it is."""
        sealed = dict(data)
        clear: dict[str, str] = {}
        for name in fields:
            value = data.get(name)
            if isinstance(value, str):
                clear[name] = value
                sealed[name] = self._seal(value)
        return sealed, clear

    def hold(self, preview_id: str, clear: Mapping[str, str], *, until: float, now: float) -> None:
        """Keep ``clear`` for ``preview_id`` until ``until``; forget what expired by ``now``."""
        for key in [k for k, (expiry, _) in self._held.items() if expiry <= now]:
            del self._held[key]
        if clear:
            self._held[preview_id] = (until, dict(clear))

    def holds(self, preview_id: str) -> bool:
        """Whether the values of ``preview_id`` are held here."""
        return preview_id in self._held

    def unseal(
        self, preview_id: str, data: JSONObject, fields: frozenset[str]
    ) -> JSONObject | None:
        """``data`` with each sealed field given back its value; ``None`` when a value is
        not held here or does not match its seal."""
        held = self._held.get(preview_id)
        values = held[1] if held is not None else {}
        out = dict(data)
        for name in fields:
            stored = data.get(name)
            if not (isinstance(stored, str) and stored.startswith(SEAL_PREFIX)):
                continue
            value = values.get(name)
            if value is None or not hmac.compare_digest(self._seal(value), stored):
                return None
            out[name] = value
        return out

    def release(self, preview_id: str) -> None:
        """Forget the values of ``preview_id`` (its step is settled)."""
        self._held.pop(preview_id, None)

    def _seal(self, value: str) -> str:
        digest = hmac.new(self._key, value.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return SEAL_PREFIX + digest.hexdigest()[:32]


class SealedSender(Sender):
    """A sender that hands a step's sealed values back to ``commit`` from the vault, and
    never sends a seal in their place: without the values, the step stays ``unknown``."""

    def __init__(
        self,
        ledger: LedgerStore,
        audit_log: AuditLog,
        *,
        clock: Callable[[], float],
        lease_grace: float,
        vault: SecretVault,
    ) -> None:
        super().__init__(ledger, audit_log, clock=clock, lease_grace=lease_grace)
        self.vault = vault

    async def send(
        self, spec: ToolSpec, claimed: Preview, *, resolved_by: ResolvedBy, actor: str
    ) -> Receipt:
        fields = sealed_fields(spec)
        if fields:
            effect = self.vault.unseal(claimed.id, claimed.effect, fields)
            if effect is None:
                raise self.ambiguous(claimed, "its secret is not held by this process")
            claimed = dataclasses.replace(claimed, effect=effect)
        return await super().send(spec, claimed, resolved_by=resolved_by, actor=actor)

    def forget_if_settled(self, preview_id: str) -> None:
        """Let go of ``preview_id``'s sealed values once its step is settled (or gone).
        Housekeeping after a call: a ledger failing here keeps them (logged) and never takes
        the place of how the call ended, a cancellation included."""
        try:
            current = self.ledger.preview(preview_id)
            if current is None or current.state in ("committed", "failed", "denied"):
                self.vault.release(preview_id)
        except Exception:
            _log.warning("could not let go of the sealed values of %s", preview_id, exc_info=True)
