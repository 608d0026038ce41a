"""A name lookup made through the event loop (what httpx, anyio and asyncio libraries do) is
checked in the caller's context, before the name reaches the resolver: the resolver runs on
an executor thread, where no call is current."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from airlock.tools._destination import parse_destination
from airlock.tools._egress import DeclaredReach, enter, leave
from airlock.tools._egress_hook import UndeclaredReachError, install

pytestmark = pytest.mark.anyio

Lookup = Callable[[str], Awaitable[object]]
LOOKUPS: dict[str, Lookup] = {
    "loop": lambda name: asyncio.get_running_loop().getaddrinfo(name, 443),
    "anyio": lambda name: anyio.getaddrinfo(name, 443),
}


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names handed to the resolver; it answers with one loopback address, offline."""
    install()  # first: it wraps socket.getaddrinfo once per process, never the stand-in
    names: list[str] = []

    def resolver(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        names.append(host.decode() if isinstance(host, bytes) else str(host))
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 443))]

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    return names


@pytest.mark.parametrize("how", sorted(LOOKUPS))
@pytest.mark.parametrize(
    ("name", "refused"),
    [
        ("data-to-leak.invalid", True),
        ("c2VjcmV0.api.example.com.evil.example", True),
        ("api.example.com", False),
        ("API.example.com.", False),
    ],
)
async def test_a_lookup_through_the_event_loop_is_checked_in_the_callers_context(
    asked: list[str], how: str, name: str, refused: bool
) -> None:
    reach = DeclaredReach(
        tool="t",
        destinations=(parse_destination("https://api.example.com"),),
        network=(),
        credentials=frozenset(),
        tenant_credentials={},
    )
    check = reach.check(phase="handler", tenant="acme")
    token = enter(check)
    try:
        if refused:
            with pytest.raises(UndeclaredReachError):
                await LOOKUPS[how](name)
        else:
            await LOOKUPS[how](name)
    finally:
        leave(token, check)
    assert bool(check.violations) is refused
    assert (name in asked) is not refused  # a refused name never reached the resolver


@pytest.mark.parametrize("how", sorted(LOOKUPS))
async def test_a_lookup_outside_any_call_is_left_alone(asked: list[str], how: str) -> None:
    await LOOKUPS[how]("anything.invalid")
    assert asked == ["anything.invalid"]
