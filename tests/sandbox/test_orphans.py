"""Containers left by a crashed host process are removed at start-up; live owners' are not.

Several airlock processes share one engine (two test runs, tests and a benchmark): each one's
reaper must remove only containers whose owning process is gone, and must not fail when
another process removes containers while it looks.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import docker
import psutil
import pytest

from airlock.sandbox import reap_orphans
from airlock.sandbox._owner import LABEL, OWNER_LABEL, START_LABEL, owner_labels
from tests.conftest import IMAGE

pytestmark = pytest.mark.docker


def _labelled(client: docker.DockerClient, labels: dict[str, str]) -> str:
    # The low-level create: the high-level one looks the container up after creating it, and
    # another test process's reaper may remove a dead owner's container in between.
    created = client.api.create_container(
        IMAGE,
        labels={LABEL: "1", **labels},
        host_config=client.api.create_host_config(network_mode="none"),
    )
    return str(created["Id"])


def _exists(client: docker.DockerClient, cid: str) -> bool:
    try:
        client.containers.get(cid)
    except docker.errors.NotFound:
        return False
    return True


def _gone(client: docker.DockerClient, cid: str, within_s: float = 10.0) -> bool:
    """Whether ``cid`` is gone within ``within_s``: a container another process's reaper is
    removing is still listed until its removal ends (the engine answers 409 meanwhile)."""
    end = time.monotonic() + within_s
    while _exists(client, cid):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _remove(client: docker.DockerClient, *cids: str) -> None:
    for cid in cids:
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            client.api.remove_container(cid, force=True)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """Another live process on this host: a foreign owner."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def _dead_pid() -> tuple[int, float]:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    created = psutil.Process(child.pid).create_time()
    child.wait()
    return child.pid, created


def test_orphans_of_dead_processes_are_reaped(docker_client: docker.DockerClient) -> None:
    pid, created = _dead_pid()
    host = socket.gethostname()
    orphan = _labelled(docker_client, {OWNER_LABEL: f"{host}/{pid}/{created:.3f}/n1"})
    # This process's pid, but another start: the pid was reused after the owner died.
    reused = _labelled(docker_client, {OWNER_LABEL: f"{host}/{psutil.Process().pid}/1.000/n2"})
    live = _labelled(docker_client, owner_labels())
    foreign = _labelled(docker_client, {OWNER_LABEL: f"another-host/{pid}/{created:.3f}/n3"})
    unlabelled_owner = _labelled(docker_client, {})
    try:
        reap_orphans(docker_client)
        # Another process's reaper may have removed them first: gone is what matters.
        assert _gone(docker_client, orphan)
        assert _gone(docker_client, reused)
        assert _exists(docker_client, live)
        assert _exists(docker_client, foreign)
        assert _exists(docker_client, unlabelled_owner)
    finally:
        _remove(docker_client, orphan, reused, live, foreign, unlabelled_owner)


def test_a_live_foreign_owner_keeps_its_containers_until_it_dies(
    docker_client: docker.DockerClient, sleeper: subprocess.Popen[bytes]
) -> None:
    theirs = _labelled(docker_client, owner_labels(sleeper.pid))
    try:
        assert theirs not in reap_orphans(docker_client)
        assert _exists(docker_client, theirs)
        sleeper.kill()
        sleeper.wait()
        reap_orphans(docker_client)
        assert _gone(docker_client, theirs)
    finally:
        _remove(docker_client, theirs)


def test_a_stepped_wall_clock_does_not_make_a_live_owner_look_dead(
    docker_client: docker.DockerClient, sleeper: subprocess.Popen[bytes]
) -> None:
    # The wall-clock start time of a process is recomputed from the boot time, which moves
    # when the clock is stepped (NTP, a resumed VM): the owner's recorded value and the one
    # the reaper computes can then differ although the process is the same.
    labels = owner_labels(sleeper.pid)
    host, pid, created, nonce = labels[OWNER_LABEL].split("/")
    stepped = {**labels, OWNER_LABEL: f"{host}/{pid}/{float(created) + 7.0:.3f}/{nonce}"}
    # Containers labelled by a version without the start mark: a second of jitter is the
    # same process too.
    legacy = {OWNER_LABEL: f"{host}/{pid}/{float(created) + 0.6:.3f}/{nonce}"}
    cids = [_labelled(docker_client, stepped), _labelled(docker_client, legacy)]
    try:
        removed = reap_orphans(docker_client)
        assert not set(cids) & set(removed)
        assert all(_exists(docker_client, cid) for cid in cids)
    finally:
        _remove(docker_client, *cids)


def test_a_start_mark_of_another_process_is_a_dead_owner(
    docker_client: docker.DockerClient, sleeper: subprocess.Popen[bytes]
) -> None:
    labels = owner_labels(sleeper.pid)
    boot, namespace, ticks = labels[START_LABEL].split(":")
    # The same pid, started later: the owner died and its pid was reused.
    reused = {**labels, START_LABEL: f"{boot}:{namespace}:{int(ticks) + 1}"}
    # Started in an earlier boot, before this one began: the machine rebooted since. (Another
    # boot id alone could be another machine of this host name, whose owner may live.)
    host, pid, _, nonce = labels[OWNER_LABEL].split("/")
    rebooted = {
        OWNER_LABEL: f"{host}/{pid}/1.000/{nonce}",
        START_LABEL: f"00000000-0000-0000-0000-000000000000:{namespace}:{ticks}",
    }
    cids = [_labelled(docker_client, reused), _labelled(docker_client, rebooted)]
    try:
        reap_orphans(docker_client)
        assert all(_gone(docker_client, cid) for cid in cids)
    finally:
        _remove(docker_client, *cids)


def test_an_owner_in_another_pid_namespace_is_kept(docker_client: docker.DockerClient) -> None:
    # A process in a container that shares this engine and this host name: its pid means
    # nothing here, even when no process here has it.
    pid, created = _dead_pid()
    labels = owner_labels()
    host, _, _, nonce = labels[OWNER_LABEL].split("/")
    boot, namespace, _ = labels[START_LABEL].split(":")
    elsewhere = {
        OWNER_LABEL: f"{host}/{pid}/{created:.3f}/{nonce}",
        START_LABEL: f"{boot}:{int(namespace) + 1}:12345",
    }
    cid = _labelled(docker_client, elsewhere)
    try:
        assert cid not in reap_orphans(docker_client)
        assert _exists(docker_client, cid)
    finally:
        _remove(docker_client, cid)


def test_concurrent_reapers_and_live_runs_do_not_collide(
    docker_client: docker.DockerClient,
) -> None:
    """Two processes start while a third runs programs: every orphan goes, no reaper fails on
    a container someone else removed, and no live container is touched."""
    pid, created = _dead_pid()
    dead = {OWNER_LABEL: f"{socket.gethostname()}/{pid}/{created:.3f}/dead"}
    orphans = {_labelled(docker_client, dead) for _ in range(12)}
    mine = owner_labels()
    live_seen: set[str] = set()
    errors: list[BaseException] = []
    removed: list[list[str]] = []
    start = threading.Barrier(3, timeout=30)
    stop = threading.Event()

    def live_runs() -> None:
        # A live backend's own create/remove cycle, racing with the reapers' listings.
        client = docker.from_env()
        start.wait()
        while not stop.is_set():
            cid = _labelled(client, mine)
            live_seen.add(cid)
            client.api.remove_container(cid, force=True)

    def reaper() -> None:
        client = docker.from_env()
        start.wait()
        try:
            removed.append(reap_orphans(client))
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=reaper) for _ in range(2)]
    churn = threading.Thread(target=live_runs)
    for thread in [churn, *workers]:
        thread.start()
    try:
        for thread in workers:
            thread.join(60)
    finally:
        stop.set()
        churn.join(60)
        _remove(docker_client, *orphans, *live_seen)
    assert errors == []
    # (The engine may answer both of two concurrent removals of one container with success,
    # so the two lists can overlap.)
    assert not {cid for ids in removed for cid in ids} & live_seen
    assert all(_gone(docker_client, cid) for cid in orphans)
