"""Running programs: hardened per-run containers, a warm pool, and one result type."""

from airlock.sandbox._backend import SandboxBackend
from airlock.sandbox._docker import DEFAULT_IMAGE, MAX_PROGRAM_BYTES, DockerBackend
from airlock.sandbox._errors import (
    EngineUnavailable,
    ImageMissing,
    SandboxError,
    SandboxFailure,
    map_docker_errors,
)
from airlock.sandbox._kept import KeptSandbox
from airlock.sandbox._owner import reap_orphans
from airlock.sandbox._probe import PROBE_PROGRAM, ProbeFinding, judge_probe
from airlock.sandbox._result import LimitName, ProgramError, RunResult, RunStatus

__all__ = [
    "DEFAULT_IMAGE",
    "MAX_PROGRAM_BYTES",
    "PROBE_PROGRAM",
    "DockerBackend",
    "EngineUnavailable",
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
    "judge_probe",
    "map_docker_errors",
    "reap_orphans",
]
