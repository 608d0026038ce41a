"""Routes built from segments, so an id can never change which route a request reaches."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Final

from airlock.tools._errors import InvalidInputError

__all__ = [
    "CONTROL_CHARACTERS",
    "DOT_SEGMENTS",
    "MAX_SEGMENT",
    "encodable",
    "origin_of",
    "query_of",
    "route_path",
]

MAX_SEGMENT: Final = 200
"""The longest segment, in characters, as given."""
DOT_SEGMENTS: Final = frozenset({".", ".."})
"""Segments a URL parser collapses (``a/./b``, ``a/../b``): refused as given and decoded."""
CONTROL_CHARACTERS: Final = frozenset(chr(code) for code in (*range(0x20), 0x7F))
"""Characters a segment may not hold: a server or proxy may cut or split the line at them."""


def route_path(*segments: str) -> str:
    """``/a/b/c`` from segments, each percent-encoded whole (``/``, ``?``, ``#``, ``%`` too).

    ``route_path("invoices", "../admin")`` is ``/invoices/..%2Fadmin``: one segment, the
    same route. Segments that a URL parser would collapse or drop are refused.

    Raises:
        InvalidInputError: a segment is empty, in :data:`DOT_SEGMENTS` (also
            percent-encoded), holds one of :data:`CONTROL_CHARACTERS` or a character UTF-8
            cannot encode (a lone surrogate, which JSON can carry), or is over
            :data:`MAX_SEGMENT` characters.
    """
    parts = []
    for segment in segments:
        if (
            not segment
            or len(segment) > MAX_SEGMENT
            or segment in DOT_SEGMENTS
            or not encodable(segment)
            or urllib.parse.unquote(segment) in DOT_SEGMENTS
            or not CONTROL_CHARACTERS.isdisjoint(segment)
        ):
            raise InvalidInputError(
                f"{segment[:40]!r} is not a valid id; use the id exactly as a tool returned it",
                detail=f"refused path segment {segment[:80]!r}",
            )
        parts.append(urllib.parse.quote(segment, safe=""))
    return "/" + "/".join(parts)


def origin_of(url: str) -> str:
    """``scheme://host:port`` of ``url`` (the port made explicit), what the inventory lists.

    Raises:
        ValueError: ``url`` is not an absolute http(s) URL without credentials, query or
            fragment.
    """
    parsed = urllib.parse.urlsplit(url)
    if (
        parsed.scheme not in ("http", "https")
        or not parsed.hostname
        or parsed.username is not None
        or parsed.password is not None
        or parsed.query
        or parsed.fragment
    ):
        raise ValueError(
            f"base URL {url!r} must be http(s)://host[:port][/prefix] with no user, query or "
            "fragment"
        )
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    host = parsed.hostname
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"{parsed.scheme}://{host}:{port}"


def query_of(params: Mapping[str, str | int | None] | None) -> dict[str, str]:
    """The query as strings, ``None`` values left out.

    Raises:
        InvalidInputError: a name or value UTF-8 cannot encode (a lone surrogate).
    """
    query = {k: str(v) for k, v in (params or {}).items() if v is not None}
    for name, value in query.items():
        if not (encodable(name) and encodable(value)):
            raise InvalidInputError(
                "a value of this call is not valid text (a lone surrogate); send another",
                detail=f"refused query parameter {name[:80]!r}: not encodable as UTF-8",
            )
    return query


def encodable(text: str) -> bool:
    """Whether UTF-8 can encode ``text`` (a lone surrogate, which JSON can carry, it cannot)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
