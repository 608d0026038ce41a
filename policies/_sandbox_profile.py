"""The sandbox profile: every limit and isolation setting of a run, as data."""

from __future__ import annotations

import re
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from airlock.policies._seccomp import (
    SECCOMP_ALLOWED_SYSCALLS,
    ContainerRuntime,
    render_docker_seccomp,
)

__all__ = ["DISTINCT_USER", "ContainerRuntime", "LanguageMode", "SandboxImage", "SandboxProfile"]

LanguageMode = Literal["restricted", "full"]
SandboxImage = Literal["base", "data"]
"""``base``: Python's standard library (and the guest's own packages); ``data``: the same
hardened base with numpy, pandas, pyarrow and matplotlib (``make image-data``)."""

_MIB = 1024 * 1024
_TIB = 1024 * 1024 * _MIB
"""The most memory or `/tmp` a profile may name: more is no engine's setting (the Docker engine
refused 10**30 bytes at every run, a retryable failure that could never succeed)."""
DISTINCT_USER: Final = "distinct"
"""The profile's ``user`` for a uid and gid of each container's own (the default)."""
_USER: Final = re.compile(r"([0-9]+):([0-9]+)")
_MAX_ID: Final = 2**32 - 2
GVISOR_PIDS_OVERHEAD = 128
"""Host threads gVisor's own processes may use on top of the program's ``pids_limit``."""


class SandboxProfile(BaseModel):
    """How a program's container is isolated and limited. Defaults are the hardened profile.

    Fields that weaken isolation (network, writable root, root user, capabilities) are not
    settings at all: they are fixed by the backend. What remains is sizing and mode.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    language_mode: LanguageMode = Field(
        default="restricted",
        description=(
            "`restricted` compiles the program with RestrictedPython guards, an import "
            "allow-list and an attribute guard that hands out no module, frame or code object "
            "the program was not given, and forbids new processes; `full` runs plain Python. "
            "Defence in depth and clearer errors: the container is the security boundary in "
            "both modes."
        ),
    )
    image: SandboxImage = Field(
        default="base",
        description=(
            "Which image programs run in: `base` (the standard library) or `data` (numpy, "
            "pandas, pyarrow and matplotlib with the Agg backend, imported while a container "
            "warms up). The data image runs `full` mode only: its libraries load native code "
            "and evaluate strings (`DataFrame.query`, `eval`) outside RestrictedPython's "
            "guards, so a restricted guard would promise what it cannot keep; a profile with "
            '`image = "data"` and no language mode gets `full`.'
        ),
    )
    runtime: ContainerRuntime = Field(
        default="runc",
        description=(
            "OCI runtime: `runc` (default), `crun` (the same isolation as runc, from a "
            "runtime in C that starts a container with less CPU) or `runsc` (gVisor: the "
            "program's system calls then reach gVisor's kernel, not the host's; starts are "
            "slower); crun and runsc are registered with the engine by "
            "`sandbox/image/ensure-engine.sh`."
        ),
    )
    timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="Wall-clock deadline of one run; the container is killed when it passes.",
    )
    memory_bytes: int = Field(
        default=256 * _MIB,
        ge=32 * _MIB,
        le=_TIB,
        description="Memory limit; memory+swap is set to the same value, so there is no swap.",
    )
    # (the engine's least quota: a smaller one rounds to 0 nanocpus, which it reads as none)
    cpus: float = Field(
        default=1.0, ge=0.01, le=64, description="CPU quota in cores (CFS quota / period)."
    )
    pids_limit: int = Field(
        default=64, ge=8, le=4096, description="Most processes and threads alive at once."
    )
    nofile_limit: int = Field(
        default=256, ge=32, le=65536, description="Open-files ulimit (soft and hard)."
    )
    tmpfs_bytes: int = Field(
        default=16 * _MIB,
        ge=_MIB,
        le=_TIB,
        description="Size of the writable `/tmp` (tmpfs, noexec,nosuid,nodev).",
    )
    output_limit_bytes: int = Field(
        default=1 * _MIB,
        ge=1024,
        le=64 * _MIB,
        description="Cap on captured stdout and stderr each; reaching it stops the program.",
    )
    input_limit_bytes: int = Field(
        default=1024 * _MIB,
        ge=0,
        description="Total bytes of the files given to one run as inputs (mounted read-only "
        "at /data/NAME); more is refused before the container starts.",
    )
    artifact_limit_bytes: int = Field(
        default=32 * _MIB,
        ge=_MIB,
        le=1024 * _MIB,
        description="The most bytes of files (artifacts) one run returns, left in /out (tmpfs, "
        "noexec,nosuid,nodev), which holds this and a page more for each file allowed.",
    )
    artifact_limit_files: int = Field(
        default=64,
        ge=1,
        le=10_000,
        description="Most files one run may leave in /out; more fail the run as "
        "limit_exceeded (artifacts), and none is copied.",
    )
    max_proposals: int = Field(
        default=100,
        ge=0,
        le=10_000,
        description="Most writes one program may propose (`tools.propose.NAME(...)`); one "
        "more is refused as limit_exceeded (proposals), naming the limit and the amount.",
    )
    user: str = Field(
        default=DISTINCT_USER,
        description="Who the program runs as: 'distinct', a uid and gid of the container's "
        "own, taken as it starts from a range no user of the host has, so the kernel's "
        "per-user budgets (pipe buffers, pending signals) are its own; or a fixed non-root "
        "'uid:gid', which every container of the profile then shares, and those budgets "
        "with it.",
    )
    seccomp_allowed: frozenset[str] = Field(
        default=SECCOMP_ALLOWED_SYSCALLS,
        description="System calls the program may make; everything else fails with EPERM.",
    )
    allowed_imports: frozenset[str] = Field(
        default=frozenset(
            {
                "json", "math", "re", "datetime", "collections", "itertools", "functools",
                "statistics", "decimal", "csv", "asyncio", "typing", "dataclasses",
            }
        ),
        description="Top-level modules a `restricted` program may import.",
    )  # fmt: skip

    @model_validator(mode="before")
    @classmethod
    def _data_image_runs_full_mode(cls, data: Any) -> Any:
        # The data image's libraries are usable in full mode only, and need room (see
        # `image`): a profile that chooses it without naming these gets what it needs.
        if isinstance(data, dict) and data.get("image") == "data":
            return {"language_mode": "full", "memory_bytes": 1024 * _MIB, **data}
        return data

    @model_validator(mode="after")
    def _data_image_is_not_restricted(self) -> SandboxProfile:
        if self.image == "data" and self.language_mode == "restricted":
            raise ValueError(
                "the data image runs programs in full mode only: numpy, pandas and pyarrow "
                "load native code and evaluate strings outside RestrictedPython's guards. "
                "Set language_mode = 'full' (the container stays the boundary), or use "
                "image = 'base' for restricted programs"
            )
        return self

    @field_validator("user")
    @classmethod
    def _not_root(cls, value: str) -> str:
        if value == DISTINCT_USER:
            return value
        # ASCII digits only: str.isdigit() holds for other scripts' digits too, which the
        # engine refuses at every start (a failure a retry cannot mend).
        found = _USER.fullmatch(value)
        if found is None:
            raise ValueError(f"user must be {DISTINCT_USER!r} or numeric 'uid:gid', got {value!r}")
        # (the engine reads leading zeros as nothing; past ten digits an id is out of range,
        # and int() of thousands of digits is refused with a message about the interpreter)
        digits = [i.lstrip("0") or "0" for i in found.groups()]
        ids = [int(i) if len(i) <= 10 else _MAX_ID + 1 for i in digits]
        if 0 in ids:
            raise ValueError(f"the sandbox never runs as root (uid or gid 0), got {value!r}")
        if max(ids) > _MAX_ID:
            raise ValueError(
                f"a uid or gid is at most {_MAX_ID} (the kernel's ids are 32 bits, and "
                f"{_MAX_ID + 1} means none), got {value!r}"
            )
        return value

    @model_validator(mode="after")
    def _seccomp_renders(self) -> SandboxProfile:
        # Rendering refuses forbidden calls; doing it here reports the mistake at load time.
        render_docker_seccomp(self.seccomp_allowed)
        return self

    @property
    def engine_pids_limit(self) -> int:
        """The pids limit the engine sets on the container: ``pids_limit``, plus, under
        ``runsc``, the host threads of gVisor itself (its kernel and file proxy use about
        60 while idle, and a host thread per thread of the program)."""
        return self.pids_limit + (GVISOR_PIDS_OVERHEAD if self.runtime == "runsc" else 0)

    def docker_seccomp(self) -> dict[str, Any]:
        """The profile's seccomp filter as Docker's JSON, for its runtime."""
        return render_docker_seccomp(self.seccomp_allowed, runtime=self.runtime)
