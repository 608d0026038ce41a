"""What the audit store's shared queries need of a database connection.

:func:`~airlock.tools.find_calls` and :func:`~airlock.tools._audit_chain.verify_chain` are
written once, in the SQL that SQLite and PostgreSQL both speak, with ``?`` placeholders: a
``sqlite3.Connection`` is used as it is, and the PostgreSQL store hands them an adapter that
rewrites the placeholders (:class:`airlock.tools._postgres_audit.QmarkConnection`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

__all__ = ["SQLConnection", "SQLCursor", "SearchableAuditStore"]

T = TypeVar("T")


class SQLCursor(Protocol):
    """The rows of one statement."""

    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...


class SQLConnection(Protocol):
    """A connection that runs one statement with ``?`` placeholders."""

    def execute(self, sql: str, parameters: Any = ..., /) -> SQLCursor: ...


class SearchableAuditStore(Protocol):
    """An audit store whose tables :func:`~airlock.tools.find_calls` may query directly."""

    def read(self, fn: Callable[[SQLConnection], T]) -> T:
        """``fn(connection)``, for queries of the store's tables."""
        ...
