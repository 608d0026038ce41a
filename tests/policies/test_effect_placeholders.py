"""A placeholder in a ``network`` target fills only the part of the URL it sits in.

A value may not move the connection: an ``@`` in a port (``443@localhost``) or a host label
would turn what the template fixed into user information and name another host, which a
grant that covers the declared pattern would never see. Every table is the contract: a
hostile value adds a row."""

from __future__ import annotations

from typing import Any

import pytest

from airlock.policies import Effect, EffectArgumentError, network
from airlock.policies._network import network_covers, split_network

PORT = network("https://api.example.com:{port}/v1")
BARE_PORT = network("api.example.com:{port}")
LABEL = network("https://{sub}.example.com/x")
BARE_LABEL = network("{sub}.example.com")
HOST = network("https://{host}/docs")
HOST_PORT = network("{host}:8080")
USER = network("https://{user}@api.example.com/x")
SCHEME = network("{scheme}://api.example.com/x")
PATH = network("https://api.example.com/v1/{id}")
ROOT_PATH = network("https://api.example.com/{id}")
LIST_PORTS = network("https://api.example.com:{ports[]}/v1")

# (declared effect, arguments, the target it resolves to): the authority is the template's
FILLED = [
    (PORT, {"port": "8443"}, "https://api.example.com:8443/v1"),
    (PORT, {"port": 8443}, "https://api.example.com:8443/v1"),
    (PORT, {"port": "65535"}, "https://api.example.com:65535/v1"),
    (BARE_PORT, {"port": "8080"}, "api.example.com:8080"),
    (LABEL, {"sub": "a.b"}, "https://a.b.example.com/x"),
    (LABEL, {"sub": "Eu-1_b"}, "https://eu-1_b.example.com/x"),
    (BARE_LABEL, {"sub": "eu"}, "eu.example.com"),
    (HOST, {"host": "docs.example.com"}, "https://docs.example.com/docs"),
    (USER, {"user": "bot"}, "https://bot@api.example.com/x"),
    (SCHEME, {"scheme": "wss"}, "wss://api.example.com/x"),
    # a path value may hold '@' and '.': the authority ended at the first '/'
    (PATH, {"id": "a@evil.example"}, "https://api.example.com/v1/a@evil.example"),
    (ROOT_PATH, {"id": "@localhost"}, "https://api.example.com/@localhost"),
    (PATH, {"id": "inv_1.pdf"}, "https://api.example.com/v1/inv_1.pdf"),
]  # fmt: skip

# (declared effect, arguments, the field named): refused, the call does not run
REFUSED = [
    (PORT, {"port": "443@localhost"}, "port"),
    (PORT, {"port": "443@evil.example"}, "port"),
    (PORT, {"port": "@localhost"}, "port"),
    (PORT, {"port": "80a"}, "port"),
    (PORT, {"port": "443+1"}, "port"),
    (PORT, {"port": "4.43"}, "port"),
    (PORT, {"port": "-1"}, "port"),
    (PORT, {"port": -1}, "port"),
    (PORT, {"port": "0"}, "port"),
    (PORT, {"port": "65536"}, "port"),
    (PORT, {"port": "443:80"}, "port"),
    (PORT, {"port": "443/x"}, "port"),
    (PORT, {"port": "443?x"}, "port"),
    (PORT, {"port": "443#x"}, "port"),
    (PORT, {"port": "443\\x"}, "port"),
    (BARE_PORT, {"port": "1@localhost"}, "port"),
    (LABEL, {"sub": "a@evil.example"}, "sub"),
    (LABEL, {"sub": "evil.example@a"}, "sub"),
    (LABEL, {"sub": "a+b"}, "sub"),
    (LABEL, {"sub": "a/b"}, "sub"),
    (BARE_LABEL, {"sub": "x@evil.com"}, "sub"),
    (HOST, {"host": "evil.example@docs.example.com"}, "host"),
    (HOST, {"host": "docs.example.com:1"}, "host"),
    (HOST_PORT, {"host": "a@b"}, "host"),
    (USER, {"user": "a@evil.example"}, "user"),
    (USER, {"user": "evil.example@"}, "user"),
    (SCHEME, {"scheme": "a@b"}, "scheme"),
    (SCHEME, {"scheme": "http_s"}, "scheme"),
    (PATH, {"id": ".."}, "id"),
    (PATH, {"id": "a/b"}, "id"),
    (PATH, {"id": "a?b"}, "id"),
    (PATH, {"id": "a#b"}, "id"),
    (PATH, {"id": "a\\b"}, "id"),
    (PATH, {"id": "a@b@c"}, "id"),
    (LIST_PORTS, {"ports": ["443", "443@localhost"]}, "ports"),
]  # fmt: skip


def resolved_by_every_path(effect: Effect, args: dict[str, Any]) -> set[Effect]:
    """What each way of resolving a call makes of ``args`` (they must agree)."""
    out = set(effect.resolve_all(args)) | set(effect.resolver()(args))
    if effect.each is None:
        out.add(effect.resolve(args))
    return out


@pytest.mark.parametrize(("effect", "args", "target"), FILLED)
def test_a_value_fills_only_its_part_of_the_url(
    effect: Effect, args: dict[str, Any], target: str
) -> None:
    assert resolved_by_every_path(effect, args) == {network(target)}
    # It lies inside what the tool declared, part by part: a grant covering the
    # declaration covers it.
    assert network_covers(effect.pattern, target)
    template, made = split_network(effect.pattern), split_network(target)
    assert (made.user is None) == (template.user is None)
    assert (made.port is None) == (template.port is None)


@pytest.mark.parametrize(("effect", "args", "field"), REFUSED)
def test_a_value_that_would_change_another_part_is_refused(
    effect: Effect, args: dict[str, Any], field: str
) -> None:
    resolvers = [effect.resolve_all, effect.resolver()]
    if effect.each is None:
        resolvers.append(effect.resolve)
    for resolve in resolvers:
        with pytest.raises(EffectArgumentError) as info:
            resolve(args)
        assert info.value.field == field


def test_a_list_of_ports_fills_each_port_alone() -> None:
    made = LIST_PORTS.resolve_all({"ports": ["443", 8443]})
    assert made == (
        network("https://api.example.com:443/v1"),
        network("https://api.example.com:8443/v1"),
    )


def test_a_template_holds_no_query_for_a_value_to_fill() -> None:
    with pytest.raises(ValueError, match="must be 1-256 characters"):
        network("https://api.example.com/v1?q={q}")
