"""Coverage for the lock check: whether an effect or a destination one lock lists reaches
nothing the other lock's already did.

A destination is judged as the runtime judges a connection (:mod:`airlock.tools`'
``Destination.allows_port`` and its Unix socket check): a port left out is the scheme's
default where it has one (``https://host`` is port 443 only, a bare host or
``postgres://db`` any port), and a Unix socket's path is matched whole (``unix:///run/app``
is not a directory holding ``unix:///run/app/x.sock``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from urllib.parse import unquote

from airlock.policies import Effect, Grant, currency_from_field
from airlock.tools import Destination, parse_destination

__all__ = ["Covers", "destination_covered", "effect_covered"]

Covers = Callable[[str, Sequence[str]], bool]
"""Whether an item reaches nothing the items of a pool did not already."""


def effect_covered(text: str, pool: Sequence[str]) -> bool:
    """Whether effect ``text`` reaches nothing the effects in ``pool`` did not already."""
    try:
        effect = Effect.parse(text)
        others = [Effect.parse(item) for item in pool]
    except ValueError:
        return text in pool
    for other in others:
        if other.kind != effect.kind:
            continue
        if effect.kind == "spend":  # a currency a field names ("{currency}") may be any
            if (effect.target == other.target or currency_from_field(other.target)) and (
                isinstance(other.amount, str)
                or (isinstance(effect.amount, int) and effect.amount <= int(other.amount or 0))
            ):
                return True
        elif Grant(effects=(Effect(other.kind, other.pattern),)).covers(effect):
            return True
    return False


def destination_covered(text: str, pool: Sequence[str]) -> bool:
    """Whether destination ``text`` reaches nothing the destinations in ``pool`` did not: a
    part ``pool`` leaves open (scheme, user, path; a port where the scheme has no default)
    covers every value of it, a host pattern every host it matches, a path every path below
    it, a Unix socket path pattern every socket path it matches."""
    if text in pool:
        return True
    try:
        wanted = parse_destination(text)
    except ValueError:
        return effect_covered(f"network({text})", [f"network({h})" for h in pool])
    for item in pool:
        try:
            other = parse_destination(item)
        except ValueError:
            continue
        if _destination_covers(other, wanted):
            return True
    return False


def _destination_covers(wide: Destination, narrow: Destination) -> bool:
    if _dot_segments(narrow.path):  # /api/../admin is not below /api: fail closed
        return False
    if wide.is_unix or narrow.is_unix:
        return wide.covers(narrow)
    # Scheme, user and port alone, as a connection is checked (the scheme's default port);
    # host and path are compared below, where a path may hold a pattern.
    if not wide.covers(replace(narrow, host=wide.host, path=wide.path)):
        return False
    place = narrow.host + narrow.path
    for pattern in (wide.host + wide.path, wide.host + wide.path + "/**"):
        try:
            if Grant(effects=(Effect("network", pattern),)).covers(Effect("network", place)):
                return True
        except ValueError:  # characters the effect grammar has no room for: compare as text
            if place == wide.host + wide.path or place.startswith(wide.host + wide.path + "/"):
                return True
    return False


def _dot_segments(path: str) -> bool:
    """Whether ``path`` has a ``.`` or ``..`` segment, also percent-encoded (at any depth)."""
    decoded, previous = path, None
    while decoded != previous:
        previous, decoded = decoded, unquote(decoded)
    return any(segment in (".", "..") for segment in decoded.replace("\\", "/").split("/"))
