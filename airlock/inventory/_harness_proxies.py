"""The HTTP proxies the harness's own requests go through.

The model client (httpx) and the OTLP exporter (requests) both honour ``HTTP_PROXY``,
``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` (either case) as
:func:`urllib.request.getproxies` reads them, and so does the Docker client for an engine
reached over TCP. A proxy sees where each request goes (for an ``http://`` endpoint, the whole
request) and can hold it back, so it is a destination of its own. :func:`proxy_connections`
lists one for each endpoint a proxy applies to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from ipaddress import ip_address
from urllib.parse import urlsplit

from airlock.inventory._model import HarnessConnection

__all__ = ["proxy_connections"]


def proxy_connections(
    endpoints: Sequence[tuple[str, str]], environ: Mapping[str, str]
) -> tuple[HarnessConnection, ...]:
    """A ``proxy for NAME`` connection for each ``(NAME, URL)`` of ``endpoints`` whose
    requests go through a proxy under ``environ``; none for one that connects directly."""
    variables = _proxy_variables(environ)
    found: list[HarnessConnection] = []
    for name, url in endpoints:
        chosen = _proxy_for(url, variables, environ)
        if chosen is None:
            continue
        variable, value = chosen
        kind, target, user_info = _where(value)
        found.append(
            HarnessConnection(
                name=f"proxy for {name}",
                direction="outbound",
                kind=kind,
                target=target,
                locked_as=target,
                credential=variable if user_info else None,
                used_by=f"every request of the {name} ({_where(url)[1]}) goes through it: "
                f"{variable} is set and NO_PROXY does not name the host",
                note="sees where each request goes and, over http://, what it carries; it may "
                "hold back, delay or answer in the endpoint's place",
            )
        )
    return tuple(found)


def _where(url: str) -> tuple[str, str, bool]:
    """A proxy's kind, where it is (no user, password, path or query) and whether it holds
    user info; a value without a scheme is an http:// proxy, as both clients read it."""
    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
    except ValueError:  # the clients refuse it too; its text may hold a password
        return "proxy", "(a URL that does not parse)", True
    user_info, _, where = parts.netloc.rpartition("@")
    shown = parts._replace(netloc=where.lower(), path="", query="", fragment="").geturl()
    return f"{parts.scheme} proxy", shown, bool(user_info)


def _proxy_variables(environ: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """``urllib.request.getproxies_environment`` over ``environ``, keeping the name of the
    variable each value came from: scheme (``http``, ``https``, ``all``, ``no``, ...) ->
    (variable, value)."""
    found: dict[str, tuple[str, str]] = {}
    for name, value in environ.items():
        if value and name.lower().endswith("_proxy"):
            found[name.lower()[:-6]] = (name, value)
    if "REQUEST_METHOD" in environ:  # a CGI request's Proxy: header sets HTTP_PROXY
        found.pop("http", None)
    for name, value in environ.items():  # the lower-case spelling wins, and empty unsets
        if name.endswith("_proxy"):
            if value:
                found[name.lower()[:-6]] = (name, value)
            else:
                found.pop(name.lower()[:-6], None)
    return found


def _proxy_for(
    url: str, variables: Mapping[str, tuple[str, str]], environ: Mapping[str, str]
) -> tuple[str, str] | None:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    # requests' order (scheme://host, scheme, all://host, all); httpx's is the same for the
    # keys the environment can give it.
    keys = (f"{parts.scheme}://{host}", parts.scheme, f"all://{host}", "all")
    chosen = next((variables[key] for key in keys if key in variables), None)
    if chosen is None:
        return None
    # urllib's reading of NO_PROXY (httpx's) and ``no_proxy or NO_PROXY`` (requests') can
    # differ, and so do their matches: the host is exempt only when every one exempts it, so
    # a proxy one client uses is never left out.
    readings = (
        variables.get("no", ("", ""))[1],
        environ.get("no_proxy") or environ.get("NO_PROXY"),
    )
    if all(reading and _exempt(host, port, reading) for reading in readings):
        return None
    return chosen


def _exempt(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether both clients exempt ``host`` under ``no_proxy``: ``*``, the host itself, or a
    domain above it (``example.net``; ``.example.net`` for the hosts below it only), with or
    without the port."""
    names = [host] + ([f"{host}:{port}"] if port is not None else [])
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if entry == "*":
            return True
        if not entry:
            continue
        if entry in names:
            return True
        if entry == "localhost" or _literal(entry) or _literal(entry.rpartition(":")[0]):
            continue  # httpx matches an address or localhost exactly
        # httpx exempts ".example.net" for the hosts below it, not for example.net itself.
        below = entry if entry.startswith(".") else f".{entry}"
        if any(name.endswith(below) for name in names):
            return True
    return False


def _literal(text: str) -> bool:
    try:
        ip_address(text)
    except ValueError:
        return False
    return True
