"""Network targets: URL values, and grant patterns matched part by part.

A ``network`` target is ``[scheme://][user@]host[:port][/path]``. A declared or granted one
may hold the wildcards of :mod:`airlock.policies._patterns` in any part
(``https://*.example.com/docs/**``); a resolved one is concrete.

:func:`network_covers` judges a target against a grant pattern one part at a time, each with
the glob language: a part the pattern leaves out allows every value of it (``docs.example.com``
allows any scheme, port and path on that host), except that a port left out next to a known
scheme is that scheme's default (``https://docs.example.com/**`` reaches port 443 only, as
the URL does); a port the target leaves out is its scheme's default too; and a path pattern
ending in ``/**`` also allows the path it ends at (``/docs/**`` allows ``/docs`` and
``/docs/``, ``/**`` the root). :func:`may_overlap` asks whether two patterns may share a
target, part by part the same way (what a ``deny`` with targets names).

:func:`url_target` turns the value of a whole-target placeholder (``network({url})``) into the
target it reaches: ``scheme://host[:port]/path``, lower-case scheme and host, one trailing
dot of the host dropped, the scheme's default port dropped, percent-encoded letters, digits,
``-``, ``_`` and ``~`` in the path decoded and other escapes in upper case (RFC 3986 6.2.2:
``/%61dmin`` is the ``/admin`` a server reads), the query and fragment left out (a grant
judges where a call goes, not what it sends). It refuses what a grant could not judge the way
a server or an HTTP client reads it: user information
(``https://docs.example.com@evil.example/``), IPv6 literals, an IPv4 address spelled other
than as four decimal numbers (``2130706433``, ``0x7f000001``, ``0177.0.0.1``, ``127.1``: a
client connects to ``127.0.0.1``, which a rule naming it would not see), ``.`` and ``..``
segments, percent-encoded ``.``, ``/``, ``\\`` or NUL in the path, white space, control and
non-ASCII characters, and ``*``. :func:`host_target` reads a value that is one host name the
same way, and :func:`placed_host` the host a placeholder filled in a declared target.

:func:`target_covers` reads an ``email:`` pattern's domain as :mod:`airlock.policies._mail`
reads a resolved address's, and :func:`rule_target` reads a rule's patterns once as resolved
targets are (a deny on ``metadata.google.internal.`` names the host a URL reaches);
:func:`canonical_network` writes a declared target's host and port so too (``:0443`` is 443).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from airlock.policies._mail import mail_domain, mail_pattern
from airlock.policies._patterns import covers, may_share_text

__all__ = [
    "DEFAULT_PORTS",
    "NetworkTarget",
    "canonical_network",
    "host_target",
    "may_overlap",
    "network_covers",
    "placed_host",
    "rule_target",
    "split_network",
    "target_covers",
    "url_target",
]

DEFAULT_PORTS: Final[dict[str, str]] = {
    "http": "80",
    "https": "443",
    "ws": "80",
    "wss": "443",
    "ftp": "21",
}
"""The port a URL of each scheme reaches when it names none."""
MAX_URL: Final = 2048

# Matched with fullmatch: "$" would also match before a final newline.
_URL: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,15})://([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?")
_LABEL: Final = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_HOST_VALUE: Final = re.compile(r"[A-Za-z0-9._-]{1,254}")
_PORT: Final = re.compile(r"[0-9]{1,5}")
_PORT_DIGITS: Final = re.compile(r":[0-9]+")
_PATH: Final = re.compile(r"(?:/[A-Za-z0-9._~@+:%-]*)*")
_BAD_ESCAPE: Final = re.compile(r"%(?:2[eEfF]|5[cC]|00)")
_ESCAPE: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")
_ANY_ESCAPE: Final = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED: Final = frozenset(string.ascii_letters + string.digits + "-_~")
"""Characters an escape of which a server reads as the character (``.`` is one too, but
``%2e`` is refused: decoded, it could make a ``..`` segment no check saw)."""
# What WHATWG URL parsing reads as an IPv4 address: a host whose last label is a number
# (decimal, octal 0..., hex 0x...), as inet_aton and so getaddrinfo do; only the canonical
# spelling is the one a rule can name.
_NUMBER: Final = re.compile(r"[0-9]+|0x[0-9a-f]*")
_OCTET: Final = re.compile(r"25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]")


@dataclass(frozen=True, slots=True)
class NetworkTarget:
    """The parts of a network target or pattern; ``None`` where the text gives none."""

    scheme: str | None
    user: str | None
    host: str
    port: str | None
    path: str | None


@lru_cache(maxsize=8192)
def split_network(text: str) -> NetworkTarget:
    """The parts of ``text`` (a target or a pattern); scheme and host in lower case."""
    scheme: str | None = None
    rest = text
    if "://" in text:
        scheme, rest = text.split("://", 1)
        scheme = scheme.lower()
    authority, slash, tail = rest.partition("/")
    path = slash + tail if slash else None
    user: str | None = None
    if "@" in authority:
        user, authority = authority.rsplit("@", 1)
    host, colon, port = authority.rpartition(":")
    if not colon:
        host, port = authority, ""
    return NetworkTarget(scheme, user, host.lower(), port or None, path)


def network_covers(pattern: str, declared: str) -> bool:
    """Whether every target ``declared`` stands for lies inside the grant ``pattern``,
    judged part by part (see the module docstring)."""
    if pattern == declared:
        return True
    wide, narrow = split_network(pattern), split_network(declared)
    if wide.scheme is not None and (
        narrow.scheme is None or not covers(wide.scheme, narrow.scheme)
    ):
        return False
    if wide.user is not None and (narrow.user is None or not covers(wide.user, narrow.user)):
        return False
    if not covers(wide.host, narrow.host):
        return False
    wide_port = wide.port
    if wide_port is None and wide.scheme is not None:
        wide_port = DEFAULT_PORTS.get(wide.scheme)  # https://host/** means port 443
    if wide_port is not None:
        port = narrow.port
        if port is None and narrow.scheme is not None:
            port = DEFAULT_PORTS.get(narrow.scheme)
        if port is None or not covers(wide_port, port):
            return False
    if wide.path is not None:
        return _path_covers(wide.path, narrow.path or "/")
    return True


def target_covers(kind: str, pattern: str, declared: str) -> bool:
    """Whether every target ``declared`` (of an effect of ``kind``) stands for matches the
    grant or rule ``pattern``: part by part for ``network``, as one glob otherwise."""
    if kind == "network":
        return network_covers(pattern, declared)
    if kind == "disclose":  # (a resolved target is read so already: see mail_target)
        return covers(mail_pattern(pattern), mail_domain(declared))
    return covers(pattern, declared)


@lru_cache(maxsize=4096)
def may_overlap(kind: str, one: str, two: str) -> bool:
    """Whether two target patterns of an effect of ``kind`` may stand for a common target:
    part by part for ``network``, as one glob otherwise. Conservative: it may say yes to a
    pair with nothing in common, never no to a pair that shares a target. (Cached: a ``deny``
    with targets asks it of every effect that is a pattern, on every call.)"""
    if kind == "network":
        return _network_may_overlap(one, two)
    return may_share_text(one, two)


def _network_may_overlap(one: str, two: str) -> bool:
    """Whether two network patterns may stand for a common target, part by part as
    :func:`network_covers` judges them: a part either leaves out allows every value of it
    (a port left out next to a known scheme is that scheme's default)."""
    mine, theirs = split_network(one), split_network(two)
    return (
        _parts_may_overlap(mine.scheme, theirs.scheme)
        and may_share_text(mine.host, theirs.host)
        and _parts_may_overlap(_port(mine), _port(theirs))
        and _paths_may_overlap(mine.path, theirs.path)
    )


def _port(target: NetworkTarget) -> str | None:
    if target.port is None and target.scheme is not None:
        return DEFAULT_PORTS.get(target.scheme)
    return target.port


def _parts_may_overlap(one: str | None, two: str | None) -> bool:
    return one is None or two is None or may_share_text(one, two)


def _paths_may_overlap(one: str | None, two: str | None) -> bool:
    """As :func:`_parts_may_overlap`, with each path ending in ``/**`` also standing for the
    paths :func:`_path_covers` lets it allow (``/docs/**`` and ``/docs/`` share ``/docs/``)."""
    if one is None or two is None:
        return True
    return any(may_share_text(a, b) for a in _path_forms(one) for b in _path_forms(two))


def _path_forms(pattern: str) -> tuple[str, ...]:
    if pattern.endswith("/**"):
        return (pattern, pattern[:-3] or "/", pattern[:-2])
    return (pattern,)


def _path_covers(pattern: str, path: str) -> bool:
    if covers(pattern, path):
        return True
    # "/docs/**" also allows "/docs" and "/docs/"; "/**" the root.
    return pattern.endswith("/**") and path in (pattern[:-3] or "/", pattern[:-2])


def url_target(value: str) -> str:
    """The network target a URL value reaches (see the module docstring).

    Raises:
        ValueError: ``value`` is not a URL a grant can judge; the message says why, to be
            read after the field's name.
    """
    if len(value) > MAX_URL:
        raise ValueError(f"is a URL of {len(value)} characters; the limit is {MAX_URL}")
    if any(not 32 < ord(c) < 127 for c in value):
        raise ValueError(
            "holds white space, a control or a non-ASCII character; percent-encode it "
            "(and write a non-ASCII host in its xn-- form)"
        )
    match = _URL.fullmatch(value)
    if match is None:
        raise ValueError("must be a URL scheme://host[:port][/path], or one host name")
    scheme, authority, path = match.group(1).lower(), match.group(2), match.group(3) or "/"
    if "@" in authority:
        raise ValueError(
            "holds user information (user@ before the host); a URL value names a place, "
            "the credential belongs to the tool"
        )
    if authority.startswith("["):
        raise ValueError("has an IPv6 address for a host; use a host name")
    host, colon, port = authority.partition(":")
    host = _host_name(host)
    if colon:
        if not _PORT.fullmatch(port) or not 0 < int(port) < 65536:
            raise ValueError(f"has a port {port!r} that is not 1-65535")
        port = str(int(port))
        if DEFAULT_PORTS.get(scheme) == port:
            port = ""
    if not _PATH.fullmatch(path) or _ESCAPE.search(path):
        raise ValueError(
            "has a path with characters a grant cannot judge (allowed: letters, digits, "
            "/ . _ ~ @ + : - and %XX escapes; no '*')"
        )
    if _BAD_ESCAPE.search(path):
        raise ValueError(
            "has a percent-encoded '.', '/', '\\' or NUL in its path; write it plainly"
        )
    path = _ANY_ESCAPE.sub(_unescape, path)  # adds no '.', '/' or '%': the checks hold
    if any(segment in (".", "..") for segment in path.split("/")):
        raise ValueError("has a '.' or '..' segment in its path; write the path it stands for")
    if "//" in path:  # (many servers read it as one '/': a deny on /admin/** must name it)
        raise ValueError(
            "has an empty segment ('//') in its path, which many servers read as one '/'; "
            "write the path it stands for"
        )
    return f"{scheme}://{host}{':' + port if port else ''}{path}"


def host_target(value: str) -> str:
    """The network target a value that is one host name reaches: the host as
    :func:`url_target` reads a URL's host (``METADATA.google.internal.`` reaches
    ``metadata.google.internal``).

    Raises:
        ValueError: ``value`` is not one host name a grant can judge; the message says why,
            to be read after the field's name.
    """
    if not _HOST_VALUE.fullmatch(value):
        raise ValueError("must be a URL scheme://host[:port][/path], or one host name")
    return _host_name(value)


def placed_host(target: str) -> str:
    """``target``, resolved from a declared one with a placeholder in its host
    (``https://{host}/docs``), with the host as :func:`url_target` reads a URL's host: lower
    case, one trailing dot dropped; a host holding a wildcard is left as it is.

    Raises:
        ValueError: the host is not a host name (an empty label: ``internal..`` is a name no
            rule spells, that a resolver reads as ``internal``), or spells an IPv4 address
            other than as four decimal numbers.
    """
    head, host, tail = _host_of(target)
    if "*" in host:
        return target
    return head + _host_name(host) + tail


def _host_of(target: str) -> tuple[str, str, str]:
    """``target`` cut around its host: what comes before it, the host, and what follows."""
    scheme, sep, rest = target.partition("://")
    if not sep:
        scheme, rest = "", target
    authority, slash, path = rest.partition("/")
    user, at, host_port = authority.rpartition("@")
    host, colon, port = host_port.rpartition(":")
    if not colon:
        host, port = host_port, ""
    return f"{scheme}{sep}{user}{at}", host, f"{colon}{port}{slash}{path}"


def rule_target(kind: str, target: str) -> str:
    """A rule's target pattern read as a resolved target of ``kind`` is: an e-mail domain
    as :func:`mail_target` reads it, a network host as :func:`url_target` does (lower case,
    one trailing dot dropped: ``metadata.google.internal.`` is the host a URL reaches) and
    its port as :func:`canonical_network` does."""
    if kind == "disclose":
        return mail_domain(target)
    if kind != "network":
        return target
    head, host, tail = _host_of(canonical_network(target))
    return head + host.lower() + tail


def canonical_network(target: str) -> str:
    """``target`` (declared, granted or a rule's, placeholders and wildcards kept) with its
    host and port written as a connection reads them: one trailing dot of the host dropped
    (``metadata.google.internal.``), a port of digits as a number without leading zeros
    (``:0443`` is 443). The runtime check reads a declared destination so; a grant or a rule,
    which compares text, must see what it sees."""
    head, host, tail = _host_of(target)
    if len(host) > 1:
        host = host.removesuffix(".")
    port, slash, path = tail.partition("/")
    if _PORT_DIGITS.fullmatch(port):
        port = f":{int(port[1:])}"
    return f"{head}{host}{port}{slash}{path}"


def _host_name(host: str) -> str:
    host = host.lower().removesuffix(".")
    if not host or len(host) > 253 or not all(_LABEL.fullmatch(part) for part in host.split(".")):
        raise ValueError(
            f"has a host {host!r} that is not a host name (letters, digits, '-' and '_' "
            "in dot-separated labels)"
        )
    return _ipv4_checked(host)


def _ipv4_checked(host: str) -> str:
    labels = host.split(".")
    if _NUMBER.fullmatch(labels[-1]) and not (
        len(labels) == 4 and all(_OCTET.fullmatch(label) for label in labels)
    ):
        raise ValueError(
            f"has a host {host!r} that HTTP clients and resolvers read as an IPv4 address "
            "(its last label is a number); write the address as four decimal numbers 0-255 "
            "(10.0.0.1), or use a host name"
        )
    return host


def _unescape(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else "%" + match.group(1).upper()
