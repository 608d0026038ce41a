"""A named credential whose value stays on the host: never in a repr, a log or an error."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

from airlock.tools._egress import check_credential
from airlock.tools._errors import DeniedError
from airlock.tools._redact import remember_secret

__all__ = ["CREDENTIAL_NAME", "MAX_CREDENTIAL_CHARS", "Credential"]

CREDENTIAL_NAME: Final = r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$"
"""What a credential name declared for the effect inventory looks like: ``BILLING_TOKEN``."""
MAX_CREDENTIAL_CHARS: Final = 8_192
"""The longest value sent. Bounded so that a copy an upstream echoes, cut short where an
error body is cut, can be dropped whole (see ``_rest_body.error_text``)."""
_BOM: Final = "\ufeff"


class Credential:
    """A secret the REST adapter sends, known to everything else by its :attr:`name` only.

    The value is read when a request needs it (from the environment or a file, so rotating
    it needs no restart) and is never part of ``repr``/``str``, the inventory, the audit log
    or an error. Build with :meth:`from_env`, :meth:`from_file` or :meth:`from_value`.
    """

    __slots__ = ("_read", "name")

    def __init__(self, name: str, read: Callable[[], str | None]) -> None:
        self.name = name
        """What the inventory lists, e.g. ``BILLING_TOKEN``; never the value."""
        self._read = read

    @classmethod
    def from_env(cls, variable: str, *, name: str | None = None) -> Credential:
        """The value of the host environment variable ``variable`` at request time."""
        return cls(name or variable, lambda: os.environ.get(variable))

    @classmethod
    def from_file(cls, path: str | Path, *, name: str) -> Credential:
        """The first line of the file at ``path`` (a secrets mount) at request time."""
        target = Path(path)

        def read() -> str | None:
            try:
                return target.read_text(encoding="utf-8").strip() or None
            except OSError:
                return None

        return cls(name, read)

    @classmethod
    def from_value(cls, value: str, *, name: str) -> Credential:
        """A value the host already holds (a test, or a token the host was just issued)."""
        return cls(name, lambda: value)

    def reveal(self) -> str:
        """The value, for the ``Authorization`` header only. From now on the audit log and
        the REST adapter's details redact it wherever it appears (:func:`redact`).

        Inside a tool call, only a credential the tool declares is revealed (see
        :mod:`airlock.tools._egress`); the call then fails with ``denied``.

        Raises:
            UndeclaredReachError: a tool call is current and its tool does not declare
                this credential (for its principal's tenant).
            DeniedError: the credential is not configured on this host, or its value is not
                visible ASCII of at most :data:`MAX_CREDENTIAL_CHARS` characters.
        """
        check_credential(self.name)
        value = self._read()
        problem = _problem(value)
        if value is None or problem:
            raise DeniedError(
                "this tool is not configured with a credential here; do not retry it",
                reason="policy",
                detail=f"credential {self.name!r} is {problem}",
            )
        remember_secret(value)
        return value

    def __repr__(self) -> str:
        return f"Credential({self.name!r})"

    __str__ = __repr__


def _problem(value: str | None) -> str:
    """Why ``value`` cannot be sent, in words that never quote it; ``""`` if it can.

    Only visible ASCII passes: a control character makes the HTTP library refuse the header
    with the value quoted in its message, and anything else is not a token at all."""
    if not value:
        return "missing"
    if value.startswith(_BOM):
        return "malformed: it starts with a byte-order mark; save the file as UTF-8 without one"
    if len(value) > MAX_CREDENTIAL_CHARS:
        return f"malformed: over {MAX_CREDENTIAL_CHARS} characters"
    if not all("!" <= c <= "~" for c in value):
        return "malformed: it holds a space, a control or a non-ASCII character"
    return ""
