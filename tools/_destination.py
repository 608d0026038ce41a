"""Network destinations a tool declares, parsed so the effect inventory can list every one.

A tool's adapter reaches *destinations*; registration parses each one the tool declares
(:attr:`ToolSpec.destinations`, and an adapter's own ``destinations``) and refuses what it
cannot parse, so nothing a tool says it reaches is ever dropped from the inventory. Forms:

==============================  =====================================================
``api.example.com``             a host (a name, an IPv4 address or ``[IPv6]``)
``*.cdn.example.net``           a host pattern: ``*`` stands for one or more characters
``api.example.com:8443``        a host and a port
``deploy@backup.example.com``   a user at a host (ssh, sftp, ...)
``https://api.example.com``     an origin: scheme, host, optional port
``https://api.example.com/v1``  a URL with a path (the tool reaches only below it)
``postgres://db.internal:5432/app``, ``smtp://mail.example.com:587``, ``s3://bucket/prefix``:
                                any ``scheme://`` with a host (for ``s3``, the bucket)
``unix:///run/app.sock``        a Unix socket, by its path (a local service)
==============================  =====================================================

Never accepted: a password in the destination (``user:secret@host``), a query or fragment,
white space, or a ``file:`` URL (a file is not a network destination).

While a tool runs, its connections are checked against what it declares
(:mod:`airlock.tools._egress`): :meth:`Destination.allows_port` and
:meth:`Destination.matches_host` are that comparison. A destination's path is not: a
connection has a host and a port, not a path.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from airlock.policies import covers as pattern_covers
from airlock.policies import glob_regex

__all__ = ["DEFAULT_PORTS", "Destination", "destination_of", "parse_destination"]

_SCHEME: Final = re.compile(r"^[a-z][a-z0-9+.-]{0,31}$")
_USER: Final = re.compile(r"^[A-Za-z0-9._~+-]{1,64}$")
_LABEL: Final = re.compile(r"^(?:\*|[a-z0-9_](?:[a-z0-9_*-]{0,61}[a-z0-9_*])?)$")
_PORT: Final = re.compile(r"^[0-9]{1,5}$")
_PATH: Final = re.compile(r"^(?:/[A-Za-z0-9._~!$&'()*+,;=:@%-]*)+$")
_NOT_NETWORK: Final = frozenset({"file", "data", "javascript", "about", "mailto", "tel", "urn"})
_FORMS: Final = (
    "write a host ('api.example.com', '*.example.com', 'api.example.com:8443'), "
    "'user@host', scheme://host[:port][/path] ('https://api.example.com/v1', "
    "'postgres://db.internal:5432/app', 's3://bucket/prefix'), or a Unix socket "
    "('unix:///run/app.sock')"
)
_Refuse = Callable[[str], ValueError]
# The same table as the one grants and the inventory read (airlock.policies._network's, which
# policies does not export; a test pins the two equal): a scheme one of them read as one port
# and the other as any let a grant on ftp://host:21 admit a tool that connected anywhere.
DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
"""The port a destination with one of these schemes and no port of its own reaches; any other
scheme without a port (``postgres://db.internal``) leaves the port open."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Destination:
    """One parsed destination; ``None`` parts are unrestricted (a bare host: any scheme,
    port and path on it)."""

    scheme: str | None
    """Lower-case URL scheme (``https``, ``postgres``, ...), if one was given."""
    user: str | None
    """User name before ``@``, if one was given (never a password)."""
    host: str
    """Lower-case host name, host pattern (``*.example.com``), IPv4 or ``[IPv6]`` address."""
    port: int | None
    """Port, if one was given."""
    path: str
    """Path below which the tool reaches, without a trailing ``/``; empty for all."""

    @property
    def text(self) -> str:
        """The canonical text: what the inventory lists and the lock file holds."""
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port is not None else ""
        scheme = f"{self.scheme}://" if self.scheme else ""
        return f"{scheme}{user}{self.host}{port}{self.path}"

    def __str__(self) -> str:
        return self.text

    @property
    def is_unix(self) -> bool:
        """Whether this is a Unix socket (``unix:///run/app.sock``): :attr:`path` is its path."""
        return self.scheme == "unix"

    @property
    def every_host(self) -> bool:
        """Whether the host is nothing but wildcards (``*``, ``*.*``): it names no destination."""
        return not self.is_unix and all(label == "*" for label in self.host.split("."))

    def covers(self, other: Destination) -> bool:
        """Whether everything ``other`` reaches is within this destination, judged as a
        connection is (:meth:`allows_port`, :meth:`matches_host`): a part left open here
        (scheme, user, port, path) takes any value there, except that a port left out is the
        scheme's default where it has one (:data:`DEFAULT_PORTS`: ``https://host`` is port
        443 only); a host pattern covers every host it matches, a path every path below it,
        and a Unix socket's path pattern every socket path it matches whole."""
        mine_port, their_port = (
            d.port if d.port is not None else DEFAULT_PORTS.get(d.scheme or "")
            for d in (self, other)
        )
        for mine, theirs in (
            (self.scheme, other.scheme),
            (self.user, other.user),
            (mine_port, their_port),
        ):
            if mine is not None and mine != theirs:
                return False
        if self.is_unix or other.is_unix:
            # A socket is connected to by its whole path: unix:///run/app is no directory.
            return self.is_unix and other.is_unix and pattern_covers(self.path, other.path)
        return pattern_covers(self.host, other.host) and _path_covers(self.path, other.path)

    def allows_port(self, port: int) -> bool:
        """Whether a connection to ``port`` fits: the declared port, else the scheme's default
        (:data:`DEFAULT_PORTS`), else any port."""
        expected = self.port if self.port is not None else DEFAULT_PORTS.get(self.scheme or "")
        return expected is None or expected == port

    def matches_host(self, host: str) -> bool:
        """Whether ``host`` (a lower-case name without a trailing dot, or an IP address
        without brackets) is this destination's host: the same address, the same name, or a
        name the host pattern matches (``*`` is one or more characters)."""
        if self.is_unix:
            return False
        mine = _address(self.host)
        if mine is not None:
            return mine == _address(host)
        if "*" in self.host:
            return glob_regex(self.host).fullmatch(host) is not None
        return self.host == host


def parse_destination(text: str) -> Destination:
    """Parse one declared destination (the forms are in this module's docstring).

    Raises:
        ValueError: ``text`` is not one of the forms; the message names it and says which
            forms are accepted.
    """

    def refuse(reason: str) -> ValueError:
        return ValueError(f"destination {text!r} {reason}; {_FORMS}")

    if not isinstance(text, str) or not text or len(text) > 512:
        raise refuse("must be a string of 1-512 characters")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in text):
        raise refuse("holds white space or a control character")
    if "?" in text or "#" in text:
        raise refuse("has a query or fragment: a destination is where the tool connects")
    head = text.split(":", 1)[0].lower()
    if ":" in text and head in _NOT_NETWORK:
        raise refuse(f"is a {head}: URI, not a network destination")
    scheme: str | None = None
    rest = text
    if "://" in text:
        scheme, rest = text.split("://", 1)
        scheme = scheme.lower()
        if not _SCHEME.match(scheme):
            raise refuse(f"has a malformed scheme {scheme!r}")
    if scheme == "unix":
        path = rest.rstrip("/")
        if not rest.startswith("/") or not path or not _PATH.match(path):
            raise refuse("is not a Unix socket path: write 'unix:///run/app.sock'")
        return Destination(scheme=scheme, user=None, host="", port=None, path=path)
    authority, slash, path = rest.partition("/")
    path = (slash + path).rstrip("/")
    if path and not _PATH.match(path):
        raise refuse(f"has a path {path!r} with characters a URL path cannot hold")
    user: str | None = None
    if "@" in authority:
        user, authority = authority.rsplit("@", 1)
        if ":" in user:
            raise refuse("carries a password: name the user only, and the secret as a credential")
        if not _USER.match(user):
            raise refuse(f"has a malformed user {user!r}")
    host, port = _split_port(authority, refuse)
    return Destination(scheme=scheme, user=user, host=_host(host, refuse), port=port, path=path)


def _split_port(authority: str, refuse: _Refuse) -> tuple[str, int | None]:
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise refuse("opens an IPv6 address with '[' and never closes it")
        host, tail = authority[: end + 1], authority[end + 1 :]
        if tail and not tail.startswith(":"):
            raise refuse(f"has {tail!r} after the IPv6 address")
        port_text = tail[1:] if tail else None
    elif authority.count(":") > 1:
        raise refuse("looks like an IPv6 address: write it in brackets, '[2001:db8::1]:443'")
    else:
        host, colon, after = authority.partition(":")
        port_text = after if colon else None
    if port_text is None:
        return host, None
    if not _PORT.match(port_text) or not 0 < int(port_text) < 65536:
        raise refuse(f"has a port {port_text!r} that is not 1-65535")
    return host, int(port_text)


def _host(host: str, refuse: _Refuse) -> str:
    if not host:
        raise refuse("has no host")
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise refuse(f"has {host!r}, which is not an IPv6 address") from None
        return host.lower()
    # One trailing dot at most, as a resolved target's host (policies' placed_host): an
    # empty label names no host a rule could spell.
    host = host.lower().removesuffix(".")
    labels = host.split(".")
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels) or "**" in host:
        raise refuse(
            f"has a host {host!r} that is not a host name, address or pattern (letters, digits, "
            "'-', '_' and '*' in dot-separated labels)"
        )
    return host


def destination_of(target: str) -> Destination | None:
    """The destination a resolved ``network`` effect's target names, read leniently (a URL
    with a query, a fragment or a password still names its scheme, host and port); ``None``
    when it names none.

    A call's effects are resolved from its arguments, so their targets can hold what a
    declaration may not; the runtime check needs only where they connect.
    """
    try:
        return parse_destination(target)
    except ValueError:
        pass
    if "://" not in target:
        return None
    try:
        parts = urllib.parse.urlsplit(target)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    if ":" in host:
        host = f"[{host}]"
    try:
        # (port 0 stays: read as no port, it would mean the scheme's default, or any port)
        found = parse_destination(
            f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
        )
    except ValueError:
        return None
    return found


def _path_covers(wide: str, narrow: str) -> bool:
    return not wide or narrow == wide or narrow.startswith(wide + "/")


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``host`` as an IP address (brackets and an IPv6 zone dropped), or ``None`` for a name."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
