"""A container whose create the engine answered too late is found and removed while the
backend is open, and looking for it never outlives close().

The client gives up on a create after its timeout; a loaded engine still makes the container
a moment later, with the random name the start gave it. The removal by that name right after
the failed create usually finds nothing yet, so the start leaves a search for it to go on in
the background (by name, after 0.25 s, then twice as long each time), as work of the
backend's starts: a warm pool retrying its failed starts no longer piles up such containers
until close()'s sweep. A create the engine answered with an error made nothing and is not
looked for. close() cancels every search and waits for it, within its bound; at most 16 go
on at once.

The first tests use real containers; the last stand in for the engine.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import docker
import docker.errors
import pytest
import requests.exceptions

from airlock.policies import SandboxProfile
from airlock.sandbox import DockerBackend, SandboxError
from airlock.sandbox import _closing as closing_module
from airlock.sandbox._closing import Starts
from airlock.sandbox._launch import AFTER_START, chase_late_create
from airlock.sandbox._owner import labelled_containers
from tests.conftest import IMAGE, require_docker


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def host() -> Iterator[docker.DockerClient]:
    require_docker()
    client = docker.from_env(timeout=30)
    yield client
    client.close()


def _answering_late(
    client: docker.DockerClient, *, makes: bool, after_s: float = 0.4
) -> list[threading.Thread]:
    """Have ``client``'s creates time out at once while the engine (when ``makes``) makes
    the container ``after_s`` later; the threads that make them."""
    real, making = client.api.create_container, []

    def late(*args: Any, **kwargs: Any) -> Any:
        if makes:

            def finish() -> None:
                time.sleep(after_s)
                real(*args, **kwargs)

            making.append(threading.Thread(target=finish))
            making[-1].start()
        raise requests.exceptions.ReadTimeout("Read timed out. (read timeout=30)")

    client.api.create_container = late  # type: ignore[method-assign]
    return making


def _searches() -> list[asyncio.Task[Any]]:
    return [
        t
        for t in asyncio.all_tasks()
        if not t.done() and getattr(t.get_coro(), "__name__", "") == "chase_late_create"
    ]


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_container_made_after_its_create_timed_out_is_removed_while_open(
    host: docker.DockerClient,
) -> None:
    client = docker.from_env(timeout=30)
    making = _answering_late(client, makes=True)
    backend = DockerBackend(image=IMAGE, profile=SandboxProfile(timeout_s=5), client=client)
    await backend.start()
    try:
        for _ in range(2):
            with pytest.raises(SandboxError) as raised:
                await backend.run("1")
            assert raised.value.code == "sandbox_unavailable"
        for thread in making:
            await asyncio.to_thread(thread.join, 10)
        assert len(making) == 2
        # The engine made both after their creates failed; the backend, still open, finds them.
        until, left = time.monotonic() + 8.0, [""]
        while left and time.monotonic() < until:
            await asyncio.sleep(0.1)
            left = [e["Names"] for e in labelled_containers(host, owner=backend._owner)]
        assert left == [], "containers made after their create timed out stay while open"
    finally:
        await backend.close()
        client.close()


@pytest.mark.docker
@pytest.mark.anyio
async def test_close_ends_the_search_for_containers_that_never_come(
    host: docker.DockerClient,
) -> None:
    client = docker.from_env(timeout=30)
    _answering_late(client, makes=False)  # (the engine never makes them: searched for 60 s)
    backend = DockerBackend(image=IMAGE, profile=SandboxProfile(timeout_s=5), client=client)
    await backend.start()
    try:
        for _ in range(3):
            with pytest.raises(SandboxError):
                await backend.run("1")
        assert len(backend._starts._later) == 3, "each timed-out create is searched for"
        assert len(_searches()) == 3
    finally:
        began = time.monotonic()
        await backend.close()
        closed_in = time.monotonic() - began
        client.close()
    assert closed_in < 5.0
    assert backend._starts._later == set()
    assert _searches() == [], "no search goes on after close()"


class _Api:
    """An engine that has no container of any name, and counts the removals asked of it."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def remove_container(self, name: str, **_: Any) -> None:
        self.asked.append(name)
        raise docker.errors.NotFound(f"No such container: {name}")


class _Client:
    def __init__(self) -> None:
        self.api = _Api()


async def _start_leaving(client: Any, name: str) -> None:
    """A start whose create got no answer: it leaves the search for ``name``, then fails."""
    later = AFTER_START.get()
    assert later is not None, "a start run by Starts can leave work behind"
    later(chase_late_create(client, name))
    raise SandboxError("the Docker engine did not answer: Read timed out")


@pytest.mark.anyio
async def test_at_most_some_searches_go_on_and_cancel_ends_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(closing_module, "_LATER_MOST", 3)
    starts, client = Starts(), _Client()
    for index in range(5):
        with pytest.raises(SandboxError):
            await starts.run(_start_leaving(client, f"airlock-{index}"), discard=print)
    assert len(starts._later) == 3, "the others are left undone (close()'s sweep)"
    await asyncio.sleep(1.0)
    asked = set(client.api.asked)
    assert asked == {"airlock-0", "airlock-1", "airlock-2"}
    assert len(client.api.asked) >= 6, "asked again, backing off"
    tasks = starts.cancel()
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 1.0)
    assert starts._later == set()
    # A start cancel() ended leaves no work that would outlive it.
    with pytest.raises(SandboxError):
        await starts.run(_start_leaving(client, "airlock-after"), discard=print)
    assert starts._later == set()


@pytest.mark.anyio
async def test_a_search_stops_when_it_removed_the_container_or_its_time_is_up() -> None:
    removed: list[str] = []

    class Found(_Api):
        def remove_container(self, name: str, **_: Any) -> None:
            if len(self.asked) < 2:
                super().remove_container(name)
            removed.append(name)

    client: Any = _Client()
    client.api = Found()
    began = time.monotonic()
    assert await chase_late_create(client, "airlock-late", within=10.0)
    assert removed == ["airlock-late"]
    assert time.monotonic() - began < 3.0  # (asked at 0.25, 0.75 and 1.75 s)
    nothing: Any = _Client()
    assert not await asyncio.wait_for(chase_late_create(nothing, "airlock-x", within=0.6), 2.0)
    assert set(nothing.api.asked) == {"airlock-x"}
    assert len(nothing.api.asked) in (2, 3)  # at 0.25 s and at its end, 0.6 s
