"""What a declared target may be, checked once when an effect is built, and the form it is
kept in.

Every target is 1-256 characters of letters, digits and ``_ . @ + * / : ~ % -`` with
placeholders, without ``***``; a ``read`` or ``write`` target is a resource
(``service:object/...``).

A ``network`` target is kept with its host and port as a connection reads them
(:func:`~airlock.policies._network.canonical_network`: ``metadata.google.internal.:0443`` is
``metadata.google.internal:443``), so a grant or a rule naming that host or port names it, and
the inventory lists what is reached. One is refused (:class:`EffectTargetError`) where no
grant or rule could judge it as it is reached:

- a port holding a placeholder and anything else (``:0{port}``, ``:{port}443``): a filled
  port is read as a number, so ``0`` and ``8443`` reached port 8443, outside the declared
  ``:0*`` a grant judged;
- a literal port outside 1-65535 (``:0`` reads as no port) or a literal host a resolver
  reads as an IPv4 address written other than as four decimal numbers (``0x7f000001``,
  ``2130706433``, ``127.1``): a rule on ``127.0.0.1`` would not name it;
- a password in its user information (``https://user:secret@host``): the inventory and the
  lock file would print it; the secret belongs to the tool as a credential;
- a ``.`` or ``..`` path segment, an empty one (``//``), or a percent-encoded ``.``, ``/``,
  ``\\`` or NUL in the path: a client or a server reads ``/v1/../admin`` as ``/admin`` (and
  many servers ``//admin`` too), which a grant on ``/v1/**`` would judge as inside it and a
  ``deny`` on ``/admin/**`` would not name.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

from airlock.policies._errors import UsageError
from airlock.policies._network import _host_of, _ipv4_checked, canonical_network
from airlock.policies._placeholders import PLACEHOLDER

__all__ = ["EffectTargetError", "checked_target"]

# "\Z", not "$": "$" also matches before a final newline.
_TARGET_CHARS: Final = re.compile(r"^[A-Za-z0-9_.@+*/:~%-]+\Z")
_RESOURCE: Final = re.compile(r"^[a-z][a-z0-9_]*:[^:]")
_BAD_ESCAPE: Final = re.compile(r"%(?:2[eEfF]|5[cC]|00)")


class EffectTargetError(UsageError, ValueError):
    """A declared ``network`` target that no grant or rule could judge as a connection
    reaches it (a ``ValueError`` too, as every refusal of a declared target is)."""

    code = "effect_target"


@lru_cache(maxsize=4096)
def checked_target(kind: str, target: str) -> str:
    """``target`` of an effect of ``kind`` (not ``spend``) as it is kept: a ``network`` one
    as a connection reads it, any other as written.

    Raises:
        EffectTargetError: a ``network`` target a grant could not judge (see the module
            docstring).
        ValueError: any other target that is not one (characters, length, ``***``, a
            resource's form).
    """
    bare = PLACEHOLDER.sub("x", target)
    if not target or len(target) > 256 or not _TARGET_CHARS.match(bare):
        raise ValueError(
            f"{kind} target {target!r} must be 1-256 characters of letters, digits and "
            "_ . @ + * / : ~ % - with {field} or {field[]} placeholders"
        )
    if "***" in bare:
        raise ValueError(f"{kind} target {target!r}: use '*' or '**', not '***'")
    if kind in ("read", "write") and not _RESOURCE.match(bare):
        raise ValueError(
            f"{kind} target {target!r} must be a resource 'service:object/...', "
            "for example 'billing:invoice/{invoice_id}'"
        )
    if kind != "network" or PLACEHOLDER.fullmatch(target):
        return target  # (a whole-URL placeholder's value is read by url_target)
    _check_network(target)
    return canonical_network(target)


def _check_network(target: str) -> None:
    _, sep, rest = target.partition("://")
    authority, _, path = (rest if sep else target).partition("/")
    user, _, host_port = authority.rpartition("@")
    if ":" in user:  # (the message leaves the secret out)
        raise EffectTargetError(
            f"network target on {host_port!r} carries a password in its user information; "
            "name the user only ('deploy@host') and give the secret to the tool as a "
            "credential"
        )
    host = _host_of(target)[1]
    if host and "*" not in host and "{" not in host:
        try:  # (a resolver reads 0x7f000001 and 127.1 as 127.0.0.1, which a rule names)
            _ipv4_checked(host.lower().removesuffix("."))
        except ValueError as exc:
            raise EffectTargetError(f"network target {target!r} {exc}") from None
    _, colon, port = host_port.rpartition(":")
    if colon and port.isdigit() and not (len(port) <= 5 and 0 < int(port) < 65536):
        raise EffectTargetError(
            f"network target {target!r} has a port {port!r} that is not 1-65535 (a "
            "connection reads port 0 as none: the scheme's default, or any)"
        )
    if colon and "{" in port and not PLACEHOLDER.fullmatch(port):
        raise EffectTargetError(
            f"network target {target!r} has the port {port!r}: a port that holds a "
            "placeholder holds nothing else (':{port}'), as the filled port is read as a "
            "number (a '0' before a placeholder would not stay)"
        )
    if any(segment in (".", "..") for segment in path.split("/")):
        raise EffectTargetError(
            f"network target {target!r} has a '.' or '..' segment in its path; write the "
            "path it stands for"
        )
    if "//" in f"/{path}":
        raise EffectTargetError(
            f"network target {target!r} has an empty segment ('//') in its path, which many "
            "servers read as one '/'; write the path it stands for"
        )
    if _BAD_ESCAPE.search(path):
        raise EffectTargetError(
            f"network target {target!r} has a percent-encoded '.', '/', '\\' or NUL in its "
            "path (an escape a server may decode into a '..' segment); write it plainly"
        )
