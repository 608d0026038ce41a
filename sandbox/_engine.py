"""Questions to the container engine that need no container: is it there, and which image.

``airlock doctor`` starts with :func:`check_engine`; the effect inventory names the image
by :func:`read_image_digest`.
"""

from __future__ import annotations

from typing import Final

import docker

from airlock.sandbox._errors import SandboxError, map_docker_errors
from airlock.sandbox._probe import ProbeFinding

__all__ = ["UNKNOWN_DIGEST", "check_engine", "read_image_digest", "read_image_labels"]

UNKNOWN_DIGEST: Final = "unknown"
"""What :func:`read_image_digest` answers when no engine or no image answered."""


def read_image_digest(image: str, *, timeout: float = 3.0) -> str:
    """The content digest of ``image`` on the local engine, or ``"unknown"``.

    A repository digest (``name@sha256:...``) when the image was pulled, else the image id
    (``sha256:...``) of a local build. Never raises: no engine, no image and engine errors
    all answer ``"unknown"``.
    """
    try:
        with map_docker_errors():
            client = docker.from_env(timeout=int(max(1, timeout)))
            try:
                attrs = client.images.get(image).attrs
            finally:
                client.close()
    except SandboxError:
        return UNKNOWN_DIGEST
    digests = [str(d) for d in attrs.get("RepoDigests") or []]
    return digests[0] if digests else str(attrs.get("Id") or UNKNOWN_DIGEST)


def read_image_labels(image: str, *, timeout: float = 3.0) -> dict[str, str]:
    """The labels of ``image`` on the local engine (the data image lists its packages
    there), or ``{}`` when no engine or no image answered. Never raises."""
    try:
        with map_docker_errors():
            client = docker.from_env(timeout=int(max(1, timeout)))
            try:
                attrs = client.images.get(image).attrs
            finally:
                client.close()
    except SandboxError:
        return {}
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


def check_engine(
    image: str, *, timeout: float = 10.0, runtime: str = "runc", build: str = "make image"
) -> list[ProbeFinding]:
    """Whether the engine answers, offers ``runtime`` and holds ``image`` (built by
    ``build``): one finding per check, the first failed one last (a missing engine says
    nothing about the image). Never raises."""
    findings: list[ProbeFinding] = []
    try:
        with map_docker_errors():
            client = docker.from_env(timeout=int(max(1, timeout)))
        try:
            with map_docker_errors():
                version = client.version().get("Version", "?")
            findings.append(ProbeFinding("engine reachable", True, f"Docker {version}", ""))
            with map_docker_errors():
                offered = sorted(client.info().get("Runtimes") or {})
            if runtime not in offered:
                findings.append(
                    ProbeFinding(
                        f"runtime {runtime}",
                        False,
                        f"the engine offers {', '.join(offered) or 'no runtime'}",
                        "run `make engine` (installs runsc and crun, registers them with dockerd)",
                    )
                )
                return findings
            findings.append(ProbeFinding(f"runtime {runtime}", True, ", ".join(offered), ""))
            with map_docker_errors():
                found = client.images.get(image)
            findings.append(ProbeFinding("sandbox image", True, f"{image} {found.short_id}", ""))
        finally:
            client.close()
    except SandboxError as exc:
        unavailable = exc.code == "sandbox_unavailable"
        findings.append(
            ProbeFinding(
                "engine reachable" if unavailable else "sandbox image",
                False,
                str(exc),
                "run `make engine` (installs docker.io and starts dockerd)"
                if unavailable
                else f"run `{build}`",
            )
        )
    return findings
