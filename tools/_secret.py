"""The mark of a field whose value is never recorded in clear."""

from __future__ import annotations

__all__ = ["Secret"]


class Secret:
    """Marks a field whose value is never recorded in clear.

    Use it as ``api_token: Annotated[str, Secret(), Field(max_length=200)]``. On an input
    field (read or write tool) the value is left out of the audit log's argument hash and of
    a write's default intent; on a write tool's effect-model field (a ``str``) it is sealed
    in the ledger's preview and handed back to ``commit`` from memory (see
    :class:`~airlock.tools.WritePath`). No effect may name such a field.
    """

    def __repr__(self) -> str:
        return "Secret()"
