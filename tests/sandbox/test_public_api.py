from __future__ import annotations

from airlock import sandbox
from tests.public_api import assert_public_api

# The public API, changed only on purpose: a name added or removed fails this test.
PUBLIC_API = [
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


def test_public_api_is_pinned() -> None:
    assert_public_api(sandbox, PUBLIC_API)
