"""The baseline of the container benchmarks: one bare ``docker run --rm`` of a one-line
program, through the engine's API, as bare as a container run gets."""

from __future__ import annotations

import contextlib
import uuid

import docker
import docker.errors

BARE_COMMAND = ["python3", "-I", "-S", "-c", "import os; print(len(os.listdir('/tmp')) + 1)"]
"""Prints 1 in a clean scratch directory, as the sandboxed runs answer."""


def run_bare(client: docker.DockerClient, image: str, runtime: str | None) -> bytes:
    """Run :data:`BARE_COMMAND` in a new container of ``image`` (``--network none``, not
    root, removed after) under ``runtime`` (the engine's default for None); its output."""
    name = "airlock-bench-" + uuid.uuid4().hex[:16]
    try:
        output: bytes = client.containers.run(
            image,
            BARE_COMMAND,
            entrypoint=[],
            remove=True,
            network_mode="none",
            runtime=runtime,
            user="65534:65534",
            name=name,
        )
    except docker.errors.APIError:
        # A container whose start failed stays behind (run() removes only what ran).
        with contextlib.suppress(docker.errors.APIError):
            client.api.remove_container(name, force=True)
        raise
    return output
