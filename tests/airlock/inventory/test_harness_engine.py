"""The container engine as the lock holds it: a local socket by the variable that names it
(the same on every machine), an engine over the network by its scheme, host and port, so
moving ``DOCKER_HOST`` to another machine is growth, as moving the database server is."""

from __future__ import annotations

from pathlib import Path

import pytest

from airlock.inventory import HarnessConnection, harness_connections
from airlock.inventory._lock import LockedConnection
from airlock.inventory._lock_deployment import compare_harness

LOCAL = "DOCKER_HOST, default unix:///var/run/docker.sock"


def _engine(docker_host: str | None) -> HarnessConnection:
    found = harness_connections(
        home=Path("/srv/airlock"),
        model_endpoint="https://api.anthropic.com/v1/messages",
        model_credential="ANTHROPIC_API_KEY",
        mcp_host="127.0.0.1",
        docker_host=docker_host,
    )
    return next(c for c in found if c.name == "docker engine")


# DOCKER_HOST -> (direction, what the lock holds)
ENGINES = [
    (None, "local", LOCAL),
    ("unix:///var/run/docker.sock", "local", LOCAL),
    ("unix:///home/me/.docker/run/docker.sock", "local", LOCAL),
    ("tcp://127.0.0.1:2375", "outbound", "tcp://127.0.0.1:2375"),
    ("tcp://203.0.113.66:2375", "outbound", "tcp://203.0.113.66:2375"),
    ("tcp://Docker.Example.NET:2376/", "outbound", "tcp://docker.example.net:2376"),
    ("https://docker.example.net:2376", "outbound", "https://docker.example.net:2376"),
    ("ssh://deploy@docker.example.net", "outbound", "ssh://docker.example.net"),
    ("ssh://deploy@docker.example.net:2222", "outbound", "ssh://docker.example.net:2222"),
]


@pytest.mark.parametrize(("docker_host", "direction", "locked"), ENGINES)
def test_an_engine_over_the_network_is_locked_where_it_is(
    docker_host: str | None, direction: str, locked: str
) -> None:
    engine = _engine(docker_host)
    assert (engine.direction, engine.locked_as) == (direction, locked)
    assert "deploy" not in engine.locked_as  # never a user name


# (engine locked, engine checked, the change the check reports, or None for none)
MOVES = [
    ("tcp://127.0.0.1:2375", "tcp://203.0.113.66:2375", "growth"),
    ("tcp://127.0.0.1:2375", "tcp://127.0.0.1:2376", "growth"),
    ("unix:///var/run/docker.sock", "tcp://127.0.0.1:2375", "growth"),
    ("tcp://127.0.0.1:2375", "tcp://127.0.0.1:2375", None),
    ("unix:///var/run/docker.sock", "unix:///run/user/1000/docker.sock", None),
]


def _locked(docker_host: str) -> dict[str, LockedConnection]:
    engine = _engine(docker_host)
    return {
        engine.name: LockedConnection(
            direction=engine.direction,
            kind=engine.kind,
            locked_as=engine.locked_as,
            credential=engine.credential,
        )
    }


@pytest.mark.parametrize(("before", "after", "change"), MOVES)
def test_an_engine_moved_to_another_machine_is_growth(
    before: str, after: str, change: str | None
) -> None:
    changes = compare_harness(_locked(before), _locked(after))
    assert [c.direction for c in changes] == ([change] if change else [])
