"""What a crashed or closed owner leaves is reaped; a live owner's never is.

A backend's socket root (``/tmp/airlock-PID-XXXX``) records its owner; the next backend to
start deletes the roots of dead owners, as it removes their containers. And a backend closed
while the engine was too slow to answer its removals leaves containers that the next start
removes, even in the same, still running, process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from airlock.sandbox import DockerBackend, reap_orphans
from airlock.sandbox._owner import LABEL, owner_labels
from airlock.sandbox._socket_root import OWNER_FILE, make_socket_root, reap_socket_roots
from tests.conftest import IMAGE, require_docker


def _dead_owner() -> dict[str, str]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        return owner_labels(child.pid)
    finally:
        child.kill()
        child.wait()


def _dead(parent: Path) -> Path:
    return make_socket_root(_dead_owner(), parent=parent)


def _live(parent: Path) -> Path:
    return make_socket_root(owner_labels(), parent=parent)


def _without_owner(parent: Path) -> Path:  # an older version's, or someone else's
    root = parent / "airlock-1-older"
    root.mkdir()
    return root


def _unreadable_owner(parent: Path) -> Path:
    root = _dead(parent)
    (root / OWNER_FILE).write_text("not json", encoding="utf-8")
    return root


def _owner_is_a_link(parent: Path) -> Path:
    root = _dead(parent)
    elsewhere = parent / "elsewhere.json"
    (root / OWNER_FILE).rename(elsewhere)
    (root / OWNER_FILE).symlink_to(elsewhere)
    return root


def _link_to_a_dead_root(parent: Path) -> Path:
    target = _dead(parent / "other")
    link = parent / "airlock-2-link"
    link.symlink_to(target)
    return link


def _not_a_mapping(parent: Path) -> Path:
    root = _dead(parent)
    (root / OWNER_FILE).write_text(json.dumps(["io.airlock.owner"]), encoding="utf-8")
    return root


@pytest.mark.parametrize(
    ("make", "reaped"),
    [
        pytest.param(_dead, True, id="dead-owner"),
        pytest.param(_live, False, id="live-owner"),
        pytest.param(_without_owner, False, id="no-owner-file"),
        pytest.param(_unreadable_owner, False, id="unreadable-owner-file"),
        pytest.param(_owner_is_a_link, False, id="owner-file-is-a-link"),
        pytest.param(_link_to_a_dead_root, False, id="root-is-a-link"),
        pytest.param(_not_a_mapping, False, id="owner-not-labels"),
    ],
)
def test_socket_roots_are_reaped_only_when_their_owner_is_dead(
    tmp_path: Path, make: Callable[[Path], Path], reaped: bool
) -> None:
    (tmp_path / "other").mkdir()
    root = make(tmp_path)
    assert reap_socket_roots(parent=tmp_path) == ([root] if reaped else [])
    assert os.path.lexists(root) is not reaped
    if root.is_symlink():
        assert root.resolve().is_dir()  # what the link points at is left too


_CRASHING = """
import asyncio
from airlock.policies import SandboxProfile
from airlock.sandbox import DockerBackend

async def main():
    backend = DockerBackend(image={image!r}, profile=SandboxProfile(timeout_s=60))
    await backend.start()
    await backend.run("1")
    print(backend._socket_root, flush=True)
    await backend.run("while True: pass")

asyncio.run(main())
"""


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_crashed_owners_socket_root_is_removed_at_the_next_start() -> None:
    require_docker()
    child = subprocess.Popen(
        [sys.executable, "-c", _CRASHING.format(image=IMAGE)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 60)
        root = Path(line.strip())
        assert root.is_dir()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    async with DockerBackend(image=IMAGE):
        assert not root.exists(), f"{root} outlived its owner"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.docker
@pytest.mark.anyio
async def test_what_a_closed_backend_left_is_reaped_while_its_process_lives(
    docker_client: docker.DockerClient,
) -> None:
    closed = DockerBackend(image=IMAGE)
    await closed.close()
    # A removal close() gave up on, the engine never answering: the container is still there.
    labels = {LABEL: "1", **closed._owner_labels}
    left = docker_client.containers.create(IMAGE, labels=labels, network_mode="none")
    live = docker_client.containers.create(
        IMAGE, labels={LABEL: "1", **owner_labels()}, network_mode="none"
    )
    try:
        removed = await asyncio.to_thread(reap_orphans, docker_client)
        assert left.id in removed
        assert live.id not in removed
    finally:
        for container in (left, live):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
