"""Running programs: hardened per-run containers, a warm pool, and one result type; inputs
mounted read-only at ``/data/NAME`` and artifacts (the files a program leaves in ``/out``)
received over the bridge.

Every call to the container engine happens inside this package; what other packages need of
the engine and of the container configuration is here as plain data (:func:`check_engine`,
:func:`read_image_digest`, :func:`describe_container`).
"""

from airlock.sandbox._artifacts import ARTIFACT_URI, ArtifactRef, ArtifactStoreFailed
from airlock.sandbox._backend import SandboxBackend
from airlock.sandbox._config import (
    ContainerConfig,
    ContainerMount,
    GuestFilter,
    GuestFilterRule,
    describe_container,
    describe_guest_filter,
)
from airlock.sandbox._docker import (
    DEFAULT_DATA_IMAGE,
    DEFAULT_IMAGE,
    MAX_PROGRAM_BYTES,
    DockerBackend,
    Inputs,
)
from airlock.sandbox._engine import (
    UNKNOWN_DIGEST,
    check_engine,
    read_image_digest,
    read_image_labels,
)
from airlock.sandbox._errors import (
    EngineUnavailable,
    ImageMissing,
    RunnerExited,
    SandboxClosed,
    SandboxError,
    SandboxFailure,
    SandboxRefused,
    SocketPathTooLong,
    StartTimedOut,
)
from airlock.sandbox._images import (
    DATA_IMPORTS,
    DATA_PACKAGES,
    IMAGE_LABEL,
    PACKAGES_LABEL,
    packages_text,
)
from airlock.sandbox._inputs import (
    INPUT_NAME,
    INPUT_RESOURCE,
    InputReason,
    InputRefused,
    RunInput,
    input_effect,
    resolve_inputs,
)
from airlock.sandbox._kept import KeptSandbox
from airlock.sandbox._owner import reap_orphans
from airlock.sandbox._probe import PROBE_PROGRAM, ProbeFinding, judge_probe
from airlock.sandbox._result import (
    LimitName,
    ProgramError,
    RunResult,
    RunStatus,
    SkippedArtifact,
)

__all__ = [
    "ARTIFACT_URI",
    "DATA_IMPORTS",
    "DATA_PACKAGES",
    "DEFAULT_DATA_IMAGE",
    "DEFAULT_IMAGE",
    "IMAGE_LABEL",
    "INPUT_NAME",
    "INPUT_RESOURCE",
    "MAX_PROGRAM_BYTES",
    "PACKAGES_LABEL",
    "PROBE_PROGRAM",
    "UNKNOWN_DIGEST",
    "ArtifactRef",
    "ArtifactStoreFailed",
    "ContainerConfig",
    "ContainerMount",
    "DockerBackend",
    "EngineUnavailable",
    "GuestFilter",
    "GuestFilterRule",
    "ImageMissing",
    "InputReason",
    "InputRefused",
    "Inputs",
    "KeptSandbox",
    "LimitName",
    "ProbeFinding",
    "ProgramError",
    "RunInput",
    "RunResult",
    "RunStatus",
    "RunnerExited",
    "SandboxBackend",
    "SandboxClosed",
    "SandboxError",
    "SandboxFailure",
    "SandboxRefused",
    "SkippedArtifact",
    "SocketPathTooLong",
    "StartTimedOut",
    "check_engine",
    "describe_container",
    "describe_guest_filter",
    "input_effect",
    "judge_probe",
    "packages_text",
    "read_image_digest",
    "read_image_labels",
    "reap_orphans",
    "resolve_inputs",
]
