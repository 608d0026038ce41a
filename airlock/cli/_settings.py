"""Host-side settings, read once from the environment (prefix ``AIRLOCK_``)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Settings"]


def _default_home() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "airlock"


class Settings(BaseModel):
    """Where airlock keeps its state and which sandbox image it runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path = Field(
        default_factory=_default_home,
        description="Directory for the audit log, the ledger and run sockets.",
    )
    image: str = Field(
        default="airlock-sandbox:latest",
        description="Docker image the sandbox runs; built by `make image`.",
    )
    pool_size: int = Field(
        default=2, ge=0, le=64, description="Containers kept started and waiting for a run."
    )

    @property
    def audit_db(self) -> Path:
        """SQLite file of the audit log."""
        return self.home / "audit.db"

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """Read ``AIRLOCK_HOME``, ``AIRLOCK_IMAGE`` and ``AIRLOCK_POOL_SIZE``."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        if home := env.get("AIRLOCK_HOME"):
            values["home"] = Path(home)
        if image := env.get("AIRLOCK_IMAGE"):
            values["image"] = image
        if pool := env.get("AIRLOCK_POOL_SIZE"):
            values["pool_size"] = int(pool)
        return cls.model_validate(values)
