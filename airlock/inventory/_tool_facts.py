"""What a tool says beyond its effects: network destinations, credential names, preconditions,
idempotency.

:class:`airlock.tools.Registry` checks these facts at registration and keeps them on the
spec in canonical form (an adapter's own ``destinations`` and ``credentials`` included), so
this module reads the spec, never a handler's attributes, and drops nothing:

- ``destinations``: every form a tool may declare (a host or host pattern, ``user@host``,
  ``scheme://host[:port][/path]``: ``https``, ``postgres``, ``smtp``, ``s3``, ...), plus the
  targets of its ``network(d)`` effects; a ``network({url})`` effect reaches what a call
  names, so the inventory lists the subject's granted patterns for it instead. A destination
  that does not parse (a registry look-alike that skipped registration) is an error, never a
  silent omission;
- ``credentials``: credential *names* (never values); with ``tenant_credentials`` the one a
  principal's tenant uses (every one when it acts in any tenant);
- ``requires``: the evidence each call needs first;
- ``idempotent`` (bool) or ``idempotency`` (``"keyed"``, ...) on the spec or handler; a
  write tool (``spec.write`` set) commits with an idempotency key.
"""

from __future__ import annotations

import re
from typing import Final, cast, get_args

from airlock.inventory._errors import ToolFactError
from airlock.inventory._model import Idempotency, Requirement
from airlock.tools import CREDENTIAL_NAME, ToolSpec, parse_destination

__all__ = ["credential_names", "destinations", "idempotency"]

_NAME: Final = re.compile(CREDENTIAL_NAME)
_IDEMPOTENCY: Final[frozenset[str]] = frozenset(get_args(Idempotency))


def destinations(spec: ToolSpec) -> tuple[str, ...]:
    """Where the tool can connect: its ``network`` effects and its adapter's destinations.

    Raises:
        ToolFactError: a declared destination does not parse (only a registry look-alike
            can hold one: registration refuses it).
    """
    found: set[str] = set()
    for effect in spec.effects:
        if effect.kind == "network" and effect.takes_url:
            continue  # a URL the call names: the grant's patterns say where (_build)
        if effect.kind == "network":
            try:
                found.add(parse_destination(effect.pattern).text)
            except ValueError:
                found.add(effect.pattern)  # a valid effect pattern, listed as declared
    for item in spec.destinations:
        try:
            found.add(parse_destination(item).text)
        except (ValueError, TypeError) as exc:
            raise ToolFactError(spec.name, "destination", item, str(exc)) from None
    return tuple(sorted(found))


def credential_names(spec: ToolSpec) -> tuple[str, ...]:
    """Names of every credential the tool's adapter may send; values are never read.

    Raises:
        ToolFactError: a declared name is not a credential name (a registry look-alike).
    """
    names: set[str] = set()
    for item in (*spec.credentials, *spec.tenant_credentials.values()):
        if not (isinstance(item, str) and _NAME.match(item)):
            raise ToolFactError(spec.name, "credential", item, "not a credential's name")
        names.add(item)
    return tuple(sorted(names))


def credentials_for(spec: ToolSpec, tenant: str | None) -> tuple[tuple[str, ...], str | None]:
    """The credential names calls of a principal in ``tenant`` send, and the tenant they were
    picked for (``None`` when the adapter does not pick by tenant, or for a subject that acts
    in any tenant: a role, or a principal no entry binds to one).

    Raises:
        ToolFactError: as :func:`credential_names`.
    """
    every = credential_names(spec)
    if not spec.tenant_credentials or tenant is None:
        return every, None
    chosen = spec.tenant_credentials.get(tenant)
    return ((chosen,) if chosen is not None else ()), tenant


def requirements(spec: ToolSpec) -> tuple[Requirement, ...]:
    """The evidence each call of the tool needs first, sorted."""
    found = {
        (p.tool, tuple(sorted(p.fields.items()))): Requirement(tool=p.tool, fields=dict(p.fields))
        for p in spec.preconditions
    }
    return tuple(found[key] for key in sorted(found))


def idempotency(spec: ToolSpec) -> Idempotency:
    """Whether repeating a call is safe, by what the tool declares or what its effects imply."""
    for owner in (spec, spec.handler):
        declared = getattr(owner, "idempotent", None)
        if isinstance(declared, bool):
            return "idempotent" if declared else "not_idempotent"
        named = getattr(owner, "idempotency", None)
        if isinstance(named, str) and named in _IDEMPOTENCY:
            return cast(Idempotency, named)  # checked against the Literal's values above
    if not any(e.is_side_effect for e in spec.effects):
        return "safe"
    # Write tools (``tools.write_tool``) commit through the ledger with an idempotency key.
    if getattr(spec, "write", None) is not None:
        return "keyed"
    return "unknown"
