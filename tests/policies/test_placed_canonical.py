"""A value filling a port or a host is written as a client reads it, so a rule naming the
port or host a connection reaches names the filled target too.

A port keeps no leading zeros (``08443`` is the 8443 httpx connects to; a deny on ``:8443``
saw text it did not name; ``0443`` is the https default a rule without a port names). A host takes one
trailing dot at most (``metadata.google.internal..`` has an empty label: no rule named it,
while the egress check read it as ``metadata.google.internal``). Each table is the contract:
a hostile value adds a row."""

from __future__ import annotations

from typing import Any

import pytest

from airlock.policies import (
    ApprovalPolicy,
    ApprovalRule,
    Effect,
    EffectArgumentError,
    network,
)

PORT = network("https://api.example.com:{port}/v1")
BARE_PORT = network("api.example.com:{port}")
SCHEME_PORT = network("{scheme}://api.example.com:{port}/v1")
HOST = network("https://{host}/x")
LABEL = network("https://{sub}.example.com/x")

# (declared effect, arguments, the target it resolves to)
CANONICAL = [
    (PORT, {"port": "08443"}, "https://api.example.com:8443/v1"),
    (PORT, {"port": "0000008443"}, "https://api.example.com:8443/v1"),
    (PORT, {"port": "0" * 40 + "1"}, "https://api.example.com:1/v1"),
    (PORT, {"port": "443"}, "https://api.example.com:443/v1"),
    (PORT, {"port": "0443"}, "https://api.example.com:443/v1"),
    (PORT, {"port": 443}, "https://api.example.com:443/v1"),
    (PORT, {"port": "80"}, "https://api.example.com:80/v1"),
    (BARE_PORT, {"port": "08080"}, "api.example.com:8080"),
    (BARE_PORT, {"port": "443"}, "api.example.com:443"),  # no scheme: no default
    (SCHEME_PORT, {"scheme": "http", "port": "080"}, "http://api.example.com:80/v1"),
    (SCHEME_PORT, {"scheme": "HTTP", "port": "80"}, "HTTP://api.example.com:80/v1"),
    (SCHEME_PORT, {"scheme": "wss", "port": "0443"}, "wss://api.example.com:443/v1"),
    (SCHEME_PORT, {"scheme": "ftp", "port": "0443"}, "ftp://api.example.com:443/v1"),
    (HOST, {"host": "metadata.google.internal."}, "https://metadata.google.internal/x"),
    (HOST, {"host": "Metadata.Google.Internal"}, "https://metadata.google.internal/x"),
]  # fmt: skip

# (declared effect, arguments, the field named): refused, the call does not run
REFUSED = [
    (PORT, {"port": "0000"}, "port"),
    (PORT, {"port": "065536"}, "port"),
    (HOST, {"host": "metadata.google.internal.."}, "host"),
    (HOST, {"host": "metadata.google.internal..."}, "host"),
    (HOST, {"host": "metadata..google.internal"}, "host"),
    (HOST, {"host": ".metadata.google.internal"}, "host"),
    (HOST, {"host": "."}, "host"),
    (LABEL, {"sub": "a."}, "sub"),
    (LABEL, {"sub": ".a"}, "sub"),
]  # fmt: skip


@pytest.mark.parametrize(("effect", "args", "target"), CANONICAL)
def test_a_filled_port_or_host_is_written_as_a_client_reads_it(
    effect: Effect, args: dict[str, Any], target: str
) -> None:
    made = set(effect.resolve_all(args)) | set(effect.resolver()(args)) | {effect.resolve(args)}
    assert made == {network(target)}


@pytest.mark.parametrize(("effect", "args", "field"), REFUSED)
def test_a_port_or_host_no_rule_could_name_is_refused(
    effect: Effect, args: dict[str, Any], field: str
) -> None:
    for resolve in (effect.resolve_all, effect.resolver(), effect.resolve):
        with pytest.raises(EffectArgumentError) as info:
            resolve(args)
        assert info.value.field == field


RULES = ApprovalPolicy(
    rules=(
        ApprovalRule(id="no-443", action="deny", effect="network",
                     targets=("https://api.example.com/**",)),
        ApprovalRule(id="no-8443", action="deny", effect="network",
                     targets=("https://api.example.com:8443/**",)),
        ApprovalRule(id="no-md", action="deny", effect="network",
                     targets=("metadata.google.internal",)),
    )
)  # fmt: skip

# (declared effect, arguments): each reaches what a deny rule names, however it is spelled
DENIED = [
    (PORT, {"port": "443"}),
    (PORT, {"port": "0443"}),
    (PORT, {"port": "8443"}),
    (PORT, {"port": "08443"}),
    (PORT, {"port": "0000008443"}),
    (HOST, {"host": "metadata.google.internal"}),
    (HOST, {"host": "metadata.google.internal."}),
]


@pytest.mark.parametrize(("effect", "args"), DENIED)
def test_a_rule_naming_a_port_or_host_names_every_spelling_of_it(
    effect: Effect, args: dict[str, Any]
) -> None:
    decision = RULES.decide("t", (effect.resolve(args),), reversible=True)
    assert decision.verdict == "deny"
