from __future__ import annotations

from airlock import sandbox
from tests.public_api import assert_public_api

# The public API, changed only on purpose: a name added or removed fails this test.
PUBLIC_API = [
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


def test_public_api_is_pinned() -> None:
    assert_public_api(sandbox, PUBLIC_API)
