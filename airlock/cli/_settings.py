"""Host-side settings, read once from the environment (prefix ``AIRLOCK_``)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from airlock.harness import airlock_home

__all__ = ["Settings"]


class Settings(BaseModel):
    """Where airlock keeps its state and which sandbox image it runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path = Field(
        default_factory=airlock_home,
        description="Directory for the audit log (audit.db and its chain key audit.db.key), "
        "the ledger and run sockets: AIRLOCK_HOME, else XDG_STATE_HOME/airlock, else "
        "~/.local/state/airlock.",
    )
    image: str = Field(
        default="airlock-sandbox:latest",
        description="Docker image the sandbox runs; built by `make image`.",
    )
    data_image: str = Field(
        default="airlock-sandbox-data:latest",
        description="The data image (numpy, pandas, pyarrow, matplotlib) programs run in "
        'under a profile with `image = "data"`; built by `make image-data`.',
    )
    pool_size: int = Field(
        default=2, ge=0, le=64, description="Containers kept started and waiting for a run."
    )

    @property
    def audit_db(self) -> Path:
        """SQLite file of the audit log (a ``Harness`` without a store of its own writes
        there too); its chain key is ``audit.db.key`` beside it."""
        return self.home / "audit.db"

    @property
    def artifacts(self) -> Path:
        """Where programs' artifacts are stored, one directory per program."""
        return self.home / "artifacts"

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """Read ``AIRLOCK_HOME``, ``AIRLOCK_IMAGE``, ``AIRLOCK_DATA_IMAGE`` and
        ``AIRLOCK_POOL_SIZE``."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {"home": airlock_home(env)}
        if image := env.get("AIRLOCK_IMAGE"):
            values["image"] = image
        if data_image := env.get("AIRLOCK_DATA_IMAGE"):
            values["data_image"] = data_image
        if pool := env.get("AIRLOCK_POOL_SIZE"):
            values["pool_size"] = int(pool)
        return cls.model_validate(values)
