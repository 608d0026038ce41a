"""E-mail targets of ``disclose`` effects (``email:local@domain``), read as mail servers read
them.

:func:`mail_target` reads the domain of a resolved address as a mail server does: lower case,
one trailing dot dropped (``bob@Competitor.COM.`` is ``bob@competitor.com``), an empty label
refused; the local part is kept as it is (RFC 5321 lets a server tell its case apart), so an
``allow`` or ``ask`` names the spelling it holds and fails closed. Grant and rule patterns
are read the same way (:func:`mail_domain`), so a rule on ``*@competitor.com`` names every
spelling of it. A ``deny`` also reads local parts as most servers deliver them
(:func:`mailboxes`): ``CEO@acme.com`` and ``ceo+x@acme.com`` reach ``ceo@acme.com``.
"""

from __future__ import annotations

from functools import lru_cache

from airlock.policies._patterns import covers, has_wildcard, may_share_text

__all__ = ["mail_domain", "mail_pattern", "mail_target", "mailboxes", "may_reach_mailbox"]


def mail_target(target: str) -> str:
    """``target``, a resolved ``disclose`` target, with the domain of an ``email:`` address
    as a mail server reads it (see the module docstring); any other target as it is.

    Raises:
        ValueError: the domain has an empty label (``bob@acme..com``, ``bob@``); the
            message says why, to be read after the field's name.
    """
    read = mail_domain(target)
    domain = read.rpartition("@")[2]
    if read.startswith("email:") and "@" in read and not all(domain.split(".")):
        raise ValueError(
            f"has an e-mail domain {domain!r} with an empty label; write the address as "
            "local@domain.example"
        )
    return read


def mail_domain(pattern: str) -> str:
    """A ``disclose`` pattern or target, its e-mail domain read as :func:`mail_target` reads
    one (an empty label is left for the glob to judge: a pattern is not refused here)."""
    if not pattern.startswith("email:") or "@" not in pattern:
        return pattern
    local, _, domain = pattern.rpartition("@")
    return f"{local}@{domain.lower().removesuffix('.')}"


mail_pattern = lru_cache(maxsize=4096)(mail_domain)
""":func:`mail_domain` of a grant's or a rule's pattern: there are few of them."""


@lru_cache(maxsize=4096)
def mailboxes(target: str) -> tuple[str, str]:
    """A ``disclose`` pattern or target with an ``email:`` address, read as the mailbox it
    may reach: the domain as :func:`mail_target` reads it and the local part case-folded,
    then also with a ``+tag`` dropped (``CEO+x@Acme.com`` is ``ceo+x@acme.com``, then
    ``ceo@acme.com``); any other target twice as it is. Servers differ here (most ignore
    case, many deliver a ``+tag`` to the untagged box), so only a ``deny`` reads addresses
    this way, each reading against the same reading of its pattern: it may name more,
    never less."""
    if not target.startswith("email:") or "@" not in target:
        return target, target
    local, _, domain = mail_domain(target).removeprefix("email:").rpartition("@")
    local = local.casefold()
    return f"email:{local}@{domain}", f"email:{local.partition('+')[0]}@{domain}"


def may_reach_mailbox(target: str, patterns: tuple[str, ...]) -> bool:
    """Whether the ``disclose`` ``target`` (one address, or a pattern of them) may reach a
    mailbox one of a ``deny``'s ``patterns`` names, each of the two readings of
    :func:`mailboxes` against the same reading of the pattern."""
    if has_wildcard(target):
        as_written, *untagged = _pattern_mailboxes(target)
        return any(
            may_share_text(as_written, first)
            or any(may_share_text(mine, second) for mine in untagged)
            for first, second in map(mailboxes, patterns)
        )
    for pattern in patterns:
        for mine, theirs in zip(mailboxes(target), mailboxes(pattern), strict=True):
            if covers(theirs, mine):
                return True
    return False


@lru_cache(maxsize=4096)
def _pattern_mailboxes(target: str) -> tuple[str, ...]:
    """:func:`mailboxes` of an address pattern: as written (case-folded), then every
    pattern its addresses' mailboxes fall in with their ``+tag`` dropped. A wildcard of the
    local part may hold the ``+``: ``CEO*@acme.com`` stands for ``ceo+board@acme.com``, whose
    mailbox is ``ceo@acme.com``; so the local part is also cut at each wildcard, the cut
    wildcard left out or kept (it matched something before the ``+``)."""
    as_written, untagged = mailboxes(target)
    if not as_written.startswith("email:") or "@" not in as_written:
        return as_written, untagged
    local, _, domain = untagged.removeprefix("email:").rpartition("@")
    cuts = {local}
    for at, char in enumerate(local):
        if char == "*":
            cuts.update((local[:at], local[:at] + "**"))
    return as_written, *(f"email:{cut}@{domain}" for cut in sorted(cuts))
