"""Optional dependencies: a feature whose extra is not installed says which one to install.

    with requires_extra("mcp", feature="airlock serve --mcp"):
        import mcp

raises :class:`MissingExtraError` ("airlock serve --mcp needs 'mcp', which is not installed:
pip install 'airlock[mcp]'") instead of a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from airlock.policies import UsageError

__all__ = ["MissingExtraError", "requires_extra"]


class MissingExtraError(UsageError):
    """A feature needs an optional dependency; :attr:`extra` names the extra to install."""

    code = "missing_extra"

    def __init__(self, extra: str, *, feature: str, module: str) -> None:
        super().__init__(
            f"{feature} needs {module!r}, which is not installed: pip install 'airlock[{extra}]'"
        )
        self.extra = extra
        self.module = module


@contextmanager
def requires_extra(extra: str, *, feature: str) -> Iterator[None]:
    """Turn a missing module imported inside the block into :class:`MissingExtraError`."""
    try:
        yield
    except ModuleNotFoundError as exc:
        raise MissingExtraError(extra, feature=feature, module=exc.name or "?") from None
