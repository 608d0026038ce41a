"""The baseline of the container benchmarks: one bare ``docker run --rm`` of a one-line
program, through the engine's API, as bare as a container run gets."""

from __future__ import annotations

import contextlib
import uuid

import docker
import docker.errors

CONTAINER_OF_RUN = (
    "min([line.split('/containers/')[1][:64] for line in open('/proc/self/mountinfo') "
    "if '/containers/' in line] or [''])"
)
"""An expression: the id of the container it runs in, from the engine's files mounted into
it (``/etc/hostname`` and its peers, under ``.../containers/<id>/``); empty if none is."""
BARE_COMMAND = [
    "python3",
    "-I",
    "-S",
    "-c",
    f"import os; print(len(os.listdir('/tmp')) + 1, {CONTAINER_OF_RUN})",
]
"""Prints 1 in a clean scratch directory, as the sandboxed runs answer, and its container's
id, as the sandboxed runs of the sustained cases do."""


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
