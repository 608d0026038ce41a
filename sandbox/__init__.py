"""Running programs: hardened per-run containers, a warm pool, and one result type.

Every call to the container engine happens inside this package; what other packages need of
the engine and of the container configuration is here as plain data (:func:`check_engine`,
:func:`read_image_digest`, :func:`describe_container`).
"""

from airlock.sandbox._backend import SandboxBackend
from airlock.sandbox._config import (
    ContainerConfig,
    ContainerMount,
    GuestFilter,
    GuestFilterRule,
    describe_container,
    describe_guest_filter,
)
from airlock.sandbox._docker import DEFAULT_IMAGE, MAX_PROGRAM_BYTES, DockerBackend
from airlock.sandbox._engine import UNKNOWN_DIGEST, check_engine, read_image_digest
from airlock.sandbox._errors import EngineUnavailable, ImageMissing, SandboxError, SandboxFailure
from airlock.sandbox._kept import KeptSandbox
from airlock.sandbox._owner import reap_orphans
from airlock.sandbox._probe import PROBE_PROGRAM, ProbeFinding, judge_probe
from airlock.sandbox._result import LimitName, ProgramError, RunResult, RunStatus

__all__ = [
    "DEFAULT_IMAGE",
    "MAX_PROGRAM_BYTES",
    "PROBE_PROGRAM",
    "UNKNOWN_DIGEST",
    "ContainerConfig",
    "ContainerMount",
    "DockerBackend",
    "EngineUnavailable",
    "GuestFilter",
    "GuestFilterRule",
    "ImageMissing",
    "KeptSandbox",
    "LimitName",
    "ProbeFinding",
    "ProgramError",
    "RunResult",
    "RunStatus",
    "SandboxBackend",
    "SandboxError",
    "SandboxFailure",
    "check_engine",
    "describe_container",
    "describe_guest_filter",
    "judge_probe",
    "read_image_digest",
    "reap_orphans",
]
