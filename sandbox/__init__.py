"""Running programs: hardened per-run containers, a warm pool, and one result type."""

from sandbox._backend import SandboxBackend
from sandbox._docker import DEFAULT_IMAGE, MAX_PROGRAM_BYTES, DockerBackend
from sandbox._errors import (
    EngineUnavailable,
    ImageMissing,
    SandboxError,
    SandboxFailure,
    map_docker_errors,
)
from sandbox._kept import KeptSandbox
from sandbox._owner import reap_orphans
from sandbox._probe import PROBE_PROGRAM, ProbeFinding, judge_probe
from sandbox._result import LimitName, ProgramError, RunResult, RunStatus

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
