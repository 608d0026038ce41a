"""Routes built from segments, so an id can never change which route a request reaches."""

from __future__ import annotations

import urllib.parse

from airlock.tools._errors import InvalidInputError

__all__ = ["origin_of", "route_path"]

_MAX_SEGMENT = 200


def route_path(*segments: str) -> str:
    """``/a/b/c`` from segments, each percent-encoded whole (``/``, ``?``, ``#``, ``%`` too).

    ``route_path("invoices", "../admin")`` is ``/invoices/..%2Fadmin``: one segment, the
    same route. Segments that a URL parser would collapse or drop are refused.

    Raises:
        InvalidInputError: a segment is empty, ``.``/``..`` (also percent-encoded), holds a
            control character, or is over 200 characters.
    """
    parts = []
    for segment in segments:
        decoded = urllib.parse.unquote(segment)
        if (
            not segment
            or len(segment) > _MAX_SEGMENT
            or decoded in (".", "..")
            or segment in (".", "..")
            or any(ord(c) < 0x20 or ord(c) == 0x7F for c in segment)
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
