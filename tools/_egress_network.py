"""What a network audit event is about to reach, judged against the current call's check
(:mod:`airlock.tools._egress_hook` routes the events here): a connection, a name lookup, a
lookup of an address's name, a bind, a listen; and the audit event Python does not raise for
``socket.listen``.

Each handler returns when the call's tool declares what the event reaches and otherwise
refuses it through :meth:`~airlock.tools._egress.CallCheck.refuse` (which raises); arguments
it cannot read raise too, and the hook refuses those as unreadable.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
from typing import TYPE_CHECKING, Any, Final

from airlock.tools._resolved import address_text, host_name, names_of

if TYPE_CHECKING:
    from airlock.tools._egress import CallCheck

__all__ = [
    "LISTEN",
    "announce_listen",
    "on_bind",
    "on_connect",
    "on_listen",
    "on_lookup",
    "on_reverse_lookup",
]

LISTEN: Final = "socket.listen"
"""The audit event :func:`announce_listen` adds, with ``(socket, backlog)`` (no backlog when
none is given)."""


def on_connect(check: CallCheck, event: str, args: tuple[Any, ...]) -> None:
    """``socket.connect``, ``socket.sendto``, ``socket.sendmsg``: ``(socket, address)``."""
    sock, address = args[0], args[1]
    if address is None:  # sendmsg on a connected socket: its connect was checked
        return
    if isinstance(address, str | bytes):
        path = _unix_path(address)
        if not check.allows_unix(path):
            check.refuse("network", f"unix://{path}", event, f"connect to 'unix://{path}'")
        return
    if _is_host_and_port(address):
        host, port = address[0], address[1]
        if not check.allows_address(host, port):
            target = _host_and_port(host, port)
            check.refuse("network", target, event, f"connect to {target!r}")
        return
    target = _other_address(sock, address)
    check.refuse("network", target, event, f"connect to {target}")


def on_lookup(check: CallCheck, event: str, args: tuple[Any, ...]) -> None:
    """``socket.getaddrinfo``, ``socket.gethostbyname``: ``(host, ...)``."""
    host = args[0] if args else None
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str) or not host or address_text(host) is not None:
        return  # no name, or an address: nothing goes out; its connect is checked
    if not check.allows_name(host):
        name = host_name(host)
        check.refuse("network", name, event, f"look up the name {name!r}")


def on_reverse_lookup(check: CallCheck, event: str, args: tuple[Any, ...]) -> None:
    """``socket.gethostbyaddr`` ``(host,)`` and ``socket.getnameinfo`` ``((host, port),)``.

    A name is looked up first, as by :func:`on_lookup`. An address is looked up too: its
    name is asked of the resolver (a ``PTR`` query), and an IPv6 address has room for what
    the code chooses to put in it; so an address is allowed only when it is a declared
    host's, or this process resolved it from one.
    """
    host = args[0]
    if event == "socket.getnameinfo":  # Python takes a numeric host only; no flags are given
        if not isinstance(host, tuple) or not host:
            raise TypeError(f"{event}: no address in {args!r}")
        host = host[0]
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        raise TypeError(f"{event}: no host in {args!r}")
    if not host:  # the any-address: nothing the code chose goes out
        return
    address = address_text(host)
    if address is None:
        on_lookup(check, event, (host,))
        return
    if not any(check.allows_name(name) for name in (address, *names_of(address))):
        check.refuse("network", address, event, f"look up the name of the address {address!r}")


def on_bind(check: CallCheck, event: str, args: tuple[Any, ...]) -> None:
    """``socket.bind``: ``(socket, address)``. A tool declares where it connects, never where
    it listens or receives: every bind is refused, a declared address's too (a client's
    socket is bound by the kernel when it connects or sends, with no event)."""
    target = _local_target(args[0], args[1])
    check.refuse("network", target, event, f"bind a socket to {target!r} (to listen or receive)")


def on_listen(check: CallCheck, event: str, args: tuple[Any, ...]) -> None:
    """:data:`LISTEN`: ``(socket, ...)``. Refused as a bind is: a socket that was never bound
    is bound by the kernel when it listens, to a port of its choice on every interface."""
    sock = args[0]
    target = _local_target(sock, sock.getsockname())
    check.refuse("network", target, event, f"listen on {target!r} (to accept connections)")


def announce_listen() -> None:
    """Make ``socket.socket.listen`` (the class every standard library server and asyncio
    use) raise :data:`LISTEN` first; once per process, from the hook's ``install``. Python
    raises no event there, and a socket that was never bound raises no ``socket.bind``."""
    original = socket.socket.listen

    @functools.wraps(original)
    def listen(self: socket.socket, *args: Any) -> None:
        sys.audit(LISTEN, self, *args[:1])
        return original(self, *args)

    setattr(socket.socket, "listen", listen)  # noqa: B010


def _local_target(sock: object, address: object) -> str:
    if isinstance(address, str | bytes):
        return f"unix://{_unix_path(address)}"
    if _is_host_and_port(address):
        host, port = address[0], address[1]  # type: ignore[index]
        return _host_and_port(host, port)
    return _other_address(sock, address)


def _unix_path(address: str | bytes) -> str:
    return os.fsdecode(address).replace("\0", "@")  # "@name": an abstract socket


def _is_host_and_port(address: object) -> bool:
    return (
        isinstance(address, tuple)
        and len(address) >= 2
        and isinstance(address[0], str)
        and isinstance(address[1], int)
    )


def _host_and_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _other_address(sock: object, address: object) -> str:
    return f"{getattr(sock, 'family', '?')} {address!r}"[:200]
