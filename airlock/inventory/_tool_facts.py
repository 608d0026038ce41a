"""What a tool says beyond its contract: network destinations, credential names, idempotency.

:class:`airlock.tools.ToolSpec` declares effects; adapters (the REST adapter, for one) know
more: the hosts they reach and the credentials they send. This module reads those facts defensively
from the spec and from its handler, so an adapter that exposes them is picked up without a
change here:

- ``destinations``: host names, patterns or origins (strings; ``ToolSpec.destinations``
  holds a REST adapter's); ``network(d)`` effects count too;
- ``credentials``: credential *names* (strings, or objects with a string ``name``;
  ``ToolSpec.credentials`` holds a REST adapter's); anything else is ignored, so a value
  can never be printed by mistake;
- ``idempotent`` (bool) or ``idempotency`` (``"keyed"``, ...) on the spec or handler; a
  write tool (``spec.write`` set) commits with an idempotency key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final, cast, get_args

from airlock.inventory._model import Idempotency
from airlock.tools import ToolSpec

__all__ = ["credential_names", "destinations", "idempotency"]

_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")
# A host or pattern, optionally as an origin (``https://api.example.com:443``).
_HOST: Final = re.compile(r"^(?:https?://)?[A-Za-z0-9*\[][A-Za-z0-9_.*:\[\]-]{0,252}$")
_IDEMPOTENCY: Final[frozenset[str]] = frozenset(get_args(Idempotency))


def _facts(spec: ToolSpec, attribute: str) -> list[object]:
    found: list[object] = []
    for owner in (spec, spec.handler):
        value = getattr(owner, attribute, None)
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, Iterable):
            found.extend(value)
    return found


def destinations(spec: ToolSpec) -> tuple[str, ...]:
    """Hosts the tool can reach: its ``network`` effects and its adapter's destinations."""
    hosts = {e.pattern for e in spec.effects if e.kind == "network"}
    for item in _facts(spec, "destinations"):
        host = item if isinstance(item, str) else getattr(item, "host", None)
        if isinstance(host, str) and _HOST.match(host):
            hosts.add(host.lower())
    return tuple(sorted(hosts))


def credential_names(spec: ToolSpec) -> tuple[str, ...]:
    """Names of the credentials the tool's adapter uses; values are never read."""
    names: set[str] = set()
    for item in _facts(spec, "credentials"):
        name = item if isinstance(item, str) else getattr(item, "name", None)
        if isinstance(name, str) and _NAME.match(name):
            names.add(name)
    return tuple(sorted(names))


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
