"""Who is acting: the principal a session layer authenticated."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

__all__ = ["SCOPE_PATTERN", "Principal"]

SCOPE_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$"
"""A scope is dotted lower case with at least two parts, for example ``billing.read``."""

_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@:-]*$"

_Id = Annotated[
    str, StringConstraints(strict=True, min_length=1, max_length=128, pattern=_ID_PATTERN)
]
_Scope = Annotated[
    str, StringConstraints(strict=True, min_length=3, max_length=128, pattern=SCOPE_PATTERN)
]


class Principal(BaseModel):
    """The authenticated user a run acts for.

    Built by the application's session layer and carried in the call context. It is never
    read from tool arguments, so a model cannot name someone else.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    user_id: _Id = Field(description="Stable id of the user, unique within the tenant.")
    tenant_id: _Id = Field(description="Tenant the user belongs to; other tenants' records hide.")
    scopes: frozenset[_Scope] = Field(
        default=frozenset(),
        description="Scopes granted by the session, for example 'billing.read'.",
    )

    def has_scope(self, scope: str) -> bool:
        """Whether the session granted ``scope``."""
        return scope in self.scopes
