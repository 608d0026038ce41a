"""Host-side settings, read once from the environment (prefix ``AIRLOCK_``)."""

from __future__ import annotations

import getpass
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from airlock.harness import airlock_home
from airlock.policies import UsageError

__all__ = ["Settings", "login_name"]


class Settings(BaseModel):
    """Where airlock keeps its state and which sandbox image it runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path = Field(
        default_factory=airlock_home,
        description="Directory for the audit log (audit.db and its chain key audit.db.key), "
        "the ledger and programs' artifacts (run sockets are in $TMPDIR/airlock-*): "
        "AIRLOCK_HOME, else XDG_STATE_HOME/airlock, else ~/.local/state/airlock; made mode "
        "0700 when airlock makes it.",
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
    busy_timeout: float = Field(
        default=5.0,
        gt=0,
        le=600,
        description="Seconds a command waits for a ledger or audit store that another "
        "process holds locked before it gives up, naming the file (AIRLOCK_BUSY_TIMEOUT).",
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
        """Read ``AIRLOCK_HOME``, ``AIRLOCK_IMAGE``, ``AIRLOCK_DATA_IMAGE``,
        ``AIRLOCK_POOL_SIZE`` and ``AIRLOCK_BUSY_TIMEOUT``.

        Raises:
            UsageError: a number is malformed or out of range; the message names it.
        """
        env = os.environ if environ is None else environ
        values: dict[str, object] = {"home": airlock_home(env)}
        if image := env.get("AIRLOCK_IMAGE"):
            values["image"] = image
        if data_image := env.get("AIRLOCK_DATA_IMAGE"):
            values["data_image"] = data_image
        for name, field in (
            ("AIRLOCK_POOL_SIZE", "pool_size"),
            ("AIRLOCK_BUSY_TIMEOUT", "busy_timeout"),
        ):
            if text := env.get(name):
                values[field] = _number(name, text)
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            wrong = "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in exc.errors())
            raise UsageError(f"an AIRLOCK_ setting is out of range: {wrong}") from None


def _number(name: str, text: str) -> float | int:
    try:
        return int(text) if name == "AIRLOCK_POOL_SIZE" else float(text)
    except ValueError:
        raise UsageError(f"{name}={text!r} is not a number; set it to one, or unset it") from None


def login_name() -> str:
    """The operating system's name for the user running the command: who approves when
    ``--as`` is not given.

    Raises:
        UsageError: the system has no name for this user (no ``LOGNAME``/``USER`` and no
            passwd entry, as in a bare container); the message says to pass ``--as``.
    """
    try:
        name = getpass.getuser()
    except (OSError, KeyError):
        name = ""
    if not name:
        raise UsageError(
            f"there is no login name for user id {os.getuid()} (no LOGNAME or USER, no passwd "
            "entry); pass --as YOUR_ID"
        )
    return name
