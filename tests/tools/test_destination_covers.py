"""``Destination.covers``, which registration uses to hold an adapter to the destinations its
tool declares, agrees with the runtime check of a connection (``allows_port`` and
``matches_host``; a Unix socket's path matched whole, as ``allows_unix`` does)."""

from __future__ import annotations

import pytest

from airlock.policies import glob_regex
from airlock.tools import parse_destination

# (wide, narrow, whether wide covers narrow)
COVERS: list[tuple[str, str, bool]] = [
    ("https://api.example.com", "https://api.example.com/v1", True),
    ("api.example.com", "https://api.example.com:22", True),  # a bare host: any port
    ("https://api.example.com", "https://api.example.com:443", True),
    ("https://api.example.com:443", "https://api.example.com", True),
    ("https://api.example.com", "https://api.example.com:22", False),
    ("https://api.example.com:22", "https://api.example.com", False),
    ("wss://api.example.com", "wss://api.example.com:8443", False),
    ("api.example.com:443", "https://api.example.com", True),
    ("https://api.example.com", "api.example.com:443", False),  # any scheme
    ("postgres://db.internal", "postgres://db.internal:5432", True),  # no default port
    ("postgres://db.internal:5432", "postgres://db.internal", False),
    ("*.example.com", "https://a.example.com", True),
    ("unix:///run/app.sock", "unix:///run/app.sock", True),
    ("unix:///run/app", "unix:///run/app/x.sock", False),  # a socket is not a directory
    ("unix:///run/app/*.sock", "unix:///run/app/x.sock", True),
    ("unix:///run/app/*.sock", "unix:///run/app/sub/x.sock", False),
    ("unix:///run/app.sock", "https://run", False),
]


@pytest.mark.parametrize(("wide", "narrow", "expected"), COVERS)
def test_a_destination_covers_what_the_runtime_would_let_through(
    wide: str, narrow: str, expected: bool
) -> None:
    assert parse_destination(wide).covers(parse_destination(narrow)) is expected


PORTS = (22, 80, 443, 5432, 8443)


@pytest.mark.parametrize(("wide", "narrow", "expected"), [r for r in COVERS if r[2]])
def test_every_connection_a_covered_destination_allows_the_wider_one_allows(
    wide: str, narrow: str, expected: bool
) -> None:
    big, small = parse_destination(wide), parse_destination(narrow)
    if small.is_unix:
        assert glob_regex(big.path).fullmatch(small.path.replace("*", "x"))
        return
    host = small.host.replace("*", "x")
    for port in PORTS:
        if small.matches_host(host) and small.allows_port(port):
            assert big.matches_host(host), host
            assert big.allows_port(port), port
