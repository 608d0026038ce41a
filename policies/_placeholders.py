"""Where the placeholders of an effect's target sit, and what a value may be there.

:func:`target_parts` cuts a target around its placeholders (``{field}``, ``{field[]}``).

In a ``network`` target that is not one whole URL (``https://api.example.com:{port}/v1``,
``https://{region}.billing.example/x``) a value fills only the part of the URL its
placeholder sits in. A value is one safe segment already (:mod:`._effects`: no ``/``, ``:``,
``?``, ``#`` or ``\\``), so the scheme, the authority and the path of the filled target start
and end where the template's do. What is left is the ``@`` a segment may hold: in the
authority it would turn what the template fixed into user information and name another host
(``443@localhost`` in the port reaches ``localhost``), a host a grant that covers the declared
pattern would never be asked about. So each part takes its own characters
(:func:`check_network_value`): a port digits (1-65535 once filled), a host those of a host
name, a scheme those of a scheme, user information no ``@``; a path any segment. The filled
target then lies inside the declared pattern part by part. :func:`placed_network` reads the
filled host as a URL's host is read.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

from airlock.policies._network import placed_host, split_network

__all__ = [
    "PLACEHOLDER",
    "PlacedValueError",
    "check_network_value",
    "placed_network",
    "target_parts",
]

PLACEHOLDER: Final = re.compile(r"\{([a-z_][a-z0-9_]*)(\[\])?\}")

# What a value may hold in each part of a URL but the path (where one segment is enough).
_ALLOWED: Final = {
    "scheme": (re.compile(r"[A-Za-z0-9+.-]+"), "letters, digits and + . -"),
    "user": (re.compile(r"[A-Za-z0-9_.+-]+"), "letters, digits and _ . + - (no '@')"),
    "host": (re.compile(r"[A-Za-z0-9_.-]+"), "the letters, digits and _ . - of a host name"),
    "port": (re.compile(r"[0-9]+"), "digits"),
}
# A placeholder's stand-in while the template is cut into URL parts: no part's delimiter, and
# no character a target may hold, so it stays whole in the part it sits in.
_MARK: Final = re.compile("\x00([0-9]+)\x00")


class PlacedValueError(ValueError):
    """A filled network target is not one a grant can judge; :attr:`field` is the
    placeholder to name."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


@lru_cache(maxsize=1024)
def target_parts(target: str) -> tuple[tuple[str, str | None], ...]:
    """``a:b/{x}/c`` -> (("a:b/", None), ("", "x"), ("/c", None)); ``{x[]}`` names ``x``."""
    out: list[tuple[str, str | None]] = []
    position = 0
    for match in PLACEHOLDER.finditer(target):
        out.append((target[position : match.start()], None))
        out.append(("", match.group(1)))
        position = match.end()
    out.append((target[position:], None))
    return tuple(out)


@lru_cache(maxsize=1024)
def _places(template: str) -> tuple[tuple[str, str], ...]:
    """(field, URL part) of each placeholder of a network ``template`` outside its path, in
    the order they appear."""
    parts = target_parts(template)
    marked = "".join(
        literal if name is None else f"\x00{index}\x00"
        for index, (literal, name) in enumerate(parts)
    )
    cut = split_network(marked)
    out: list[tuple[str, str]] = []
    for part in _ALLOWED:
        for index in _MARK.findall(getattr(cut, part) or ""):
            name = parts[int(index)][1]
            assert name is not None  # (only a placeholder is marked)
            out.append((name, part))
    return tuple(out)


def check_network_value(template: str, name: str, value: str) -> None:
    """Refuse ``value`` for field ``name`` of the network ``template`` if it holds a
    character the part of the URL it fills may not (see the module docstring).

    Raises:
        ValueError: the message says why, to be read after the field's name.
    """
    for field, part in _places(template):
        allowed, chars = _ALLOWED[part]
        if field == name and allowed.fullmatch(value) is None:
            raise ValueError(
                f"fills the {part} of the network target {template!r}, which takes {chars}: "
                "a value may not change another part of the URL"
            )


def placed_network(template: str, target: str) -> str:
    """``target``, the network ``template`` filled with values :func:`check_network_value`
    passed, written as a client reads it where a placeholder fills the host or the port: the
    host as :func:`placed_host` reads it, the port as a number 1-65535 without leading zeros
    (rules compare ports as text: ``08443`` is the port 8443 a client connects to, and a
    rule naming ``:8443`` must see it so). The port stays where the template put it, the
    scheme's default too: a rule leaving the port out reads it as that default.

    Raises:
        PlacedValueError: the host is not a host name (an empty label: one trailing dot at
            most) or spells an IPv4 address other than as four decimal numbers, or the port
            is out of range.
    """
    first: dict[str, str] = {}
    for field, part in _places(template):
        first.setdefault(part, field)
    if "host" in first:
        try:
            target = placed_host(target)
        except ValueError as exc:
            raise PlacedValueError(first["host"], str(exc)) from None
    if "port" in first:
        target = _canonical_port(target, first["port"])
    return target


def _canonical_port(target: str, field: str) -> str:
    """``target`` with its port written as :func:`placed_network` says."""
    scheme, sep, rest = target.partition("://")
    authority, slash, path = rest.partition("/") if sep else target.partition("/")
    user, at, host_port = authority.rpartition("@")
    host, colon, port = host_port.rpartition(":")
    if not colon or "*" in port:
        return target
    if not (_ALLOWED["port"][0].fullmatch(port) and 0 < int(port) < 65536):
        raise PlacedValueError(field, f"makes the port {port!r}, not 1-65535")
    head = f"{scheme}{sep}" if sep else ""
    return f"{head}{user}{at}{host}{colon}{int(port)}{slash}{path}"
