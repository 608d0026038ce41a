"""Containers left by a crashed host process are removed at start-up; live owners' are not."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys

import docker
import psutil
import pytest

from sandbox import reap_orphans
from sandbox._container import LABEL, OWNER_LABEL, owner_label
from tests.conftest import IMAGE

pytestmark = pytest.mark.docker


def _labelled(client: docker.DockerClient, owner: str) -> str:
    container = client.containers.create(
        IMAGE, labels={LABEL: "1", OWNER_LABEL: owner}, network_mode="none"
    )
    return str(container.id)


def test_orphans_of_dead_processes_are_reaped(docker_client: docker.DockerClient) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    created = psutil.Process(child.pid).create_time()
    child.wait()
    dead_owner = f"{socket.gethostname()}/{child.pid}/{created:.3f}"
    reused_pid_owner = f"{socket.gethostname()}/{psutil.Process().pid}/1.000"
    other_host = f"another-host/{child.pid}/{created:.3f}"
    orphan = _labelled(docker_client, dead_owner)
    reused = _labelled(docker_client, reused_pid_owner)
    live = _labelled(docker_client, owner_label())
    foreign = _labelled(docker_client, other_host)
    try:
        removed = set(reap_orphans(docker_client))
        assert {orphan, reused} <= removed
        assert live not in removed
        assert foreign not in removed
        assert docker_client.containers.get(live)
        assert docker_client.containers.get(foreign)
    finally:
        for cid in (orphan, reused, live, foreign):
            with contextlib.suppress(docker.errors.NotFound):
                docker_client.containers.get(cid).remove(force=True)
