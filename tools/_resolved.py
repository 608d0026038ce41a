"""Names this process resolved, by address: so that the address a tool's connection goes to
can be traced back to the name it was resolved from.

:func:`recording` wraps ``socket.getaddrinfo`` (once, when the runtime checks install their
hook): every answer is remembered, including those of lookups made outside any call's context
(asyncio resolves on its executor's threads), for the most recent :data:`MAX_ADDRESSES`
addresses. Only real answers enter it, so an address counts for a name only if the resolver
said so.
"""

from __future__ import annotations

import ipaddress
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Final

__all__ = ["MAX_ADDRESSES", "address_text", "host_name", "names_of", "recording"]

MAX_ADDRESSES: Final = 4096
"""Addresses remembered (the oldest are forgotten first), each with its last 8 names."""

_NAMES: OrderedDict[str, tuple[str, ...]] = OrderedDict()
_NAMES_LOCK = threading.Lock()


def _remember(name: str, results: Iterable[Any]) -> None:
    """Note that ``name`` resolved to the addresses in ``results`` (getaddrinfo's answer)."""
    with _NAMES_LOCK:
        for *_, sockaddr in results:
            if not (isinstance(sockaddr, tuple) and sockaddr and isinstance(sockaddr[0], str)):
                continue
            address = address_text(sockaddr[0])
            if address is None:
                continue
            known = _NAMES.pop(address, ())
            _NAMES[address] = known if name in known else (*known[-7:], name)
        while len(_NAMES) > MAX_ADDRESSES:
            _NAMES.popitem(last=False)


def names_of(address: str) -> tuple[str, ...]:
    """The names this process resolved to ``address`` (most recent last)."""
    with _NAMES_LOCK:
        return _NAMES.get(address, ())


def recording(
    original: Callable[..., list[Any]],
) -> Callable[..., list[Any]]:
    """``socket.getaddrinfo`` that also remembers what each name resolved to, so a connection
    to an address can be traced to the declared name it came from. asyncio resolves on its
    executor's threads, outside any call's context: the addresses it learns count too."""

    def getaddrinfo(
        host: bytes | str | None,
        port: bytes | str | int | None,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> list[Any]:
        results = original(host, port, family, type, proto, flags)
        name = host.decode("ascii", "replace") if isinstance(host, bytes) else host
        if name and address_text(name) is None:
            _remember(host_name(name), results)
        return results

    getaddrinfo.__doc__ = original.__doc__
    getaddrinfo.__wrapped__ = original  # type: ignore[attr-defined]
    return getaddrinfo


def host_name(host: str) -> str:
    """``host`` as declared names are compared: lower case, no trailing dot."""
    return host.lower().rstrip(".")


def address_text(host: str) -> str | None:
    """``host`` as a normalized IP address (no brackets, no IPv6 zone), or ``None``."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return str(ipaddress.ip_address(text.split("%", 1)[0]))
    except ValueError:
        return None
