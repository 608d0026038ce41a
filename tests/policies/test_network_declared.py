"""A declared network target is judged where a connection goes, by grants and rules alike.

- A path pattern ending in ``/**`` also stands for the path it ends at, in an overlap as in a
  grant: a ``deny`` on ``http://localhost:8080/**`` names a tool declaring ``localh*:8080/``,
  and a grant on ``/v1/**`` may cover a tool declaring ``https://{host}/v1``.
- A declared host keeps no trailing dot and a declared port no leading zeros, as the runtime
  check reads them (``metadata.google.internal.``, ``:0443``): a rule on the host names it.
- A port holding a placeholder holds nothing else (``:0{p}`` with ``8443`` reached ``:8443``,
  outside ``:0*``); a declared target names no password and no ``.`` or ``..`` segment.

Each table is the contract: a new spelling adds a row."""

from __future__ import annotations

from typing import Any

import pytest

from airlock.policies import (
    ApprovalPolicy,
    ApprovalRule,
    Effect,
    Grant,
    UsageError,
    approval_cases,
    coverage,
    network,
)
from airlock.policies._network import may_overlap

# (one pattern, another, whether they may share a target): either way round
OVERLAP = [
    ("http://localh*:8080/", "http://localhost:8080/**", True),
    ("http://localh*:8080", "http://localhost:8080/**", True),
    ("https://*/v1", "https://api.example.com/v1/**", True),
    ("https://*/v1/", "https://api.example.com/v1/**", True),
    ("https://*/v1/x", "https://api.example.com/v1/**", True),
    ("https://*/v1/**", "https://api.example.com/v1", True),
    ("https://*/", "https://api.example.com/**", True),
    ("https://*/v1*", "https://api.example.com/v1/**", False),  # "*" is one or more
    ("https://*/v2", "https://api.example.com/v1/**", False),
    ("https://*/v1x", "https://api.example.com/v1/**", False),
    ("https://*/v", "https://api.example.com/v1/**", False),
    ("https://*/v1", "https://api.example.com/v1/x/**", False),
    ("https://*:8443/v1", "https://api.example.com/v1/**", False),
]  # fmt: skip


@pytest.mark.parametrize(("one", "two", "shared"), OVERLAP)
def test_a_path_pattern_ending_in_any_path_overlaps_the_path_it_ends_at(
    one: str, two: str, shared: bool
) -> None:
    assert may_overlap("network", one, two) is shared
    assert may_overlap("network", two, one) is shared


# (declared target, grant pattern, coverage, verdict of an approval-free call)
COVERED = [
    ("https://{host}/v1", "https://api.example.com/v1/**", "partial"),
    ("https://{host}/v1/", "https://api.example.com/v1/**", "partial"),
    ("https://{host}/", "https://api.example.com/**", "partial"),
    ("https://*/v1", "https://api.example.com/v1/**", "partial"),
    ("https://{host}/v2", "https://api.example.com/v1/**", "none"),
    ("https://{host}/v1x", "https://api.example.com/v1/**", "none"),
]  # fmt: skip


@pytest.mark.parametrize(("declared", "granted", "expected"), COVERED)
def test_coverage_sees_the_path_a_grant_ending_in_any_path_allows(
    declared: str, granted: str, expected: str
) -> None:
    assert coverage(Grant(effects=(network(granted),)), network(declared)) == expected


# (declared target, rule target, the actions that name it): the call gets the rule's verdict,
# and so does every call the inventory lists (a deny names what may overlap its targets, an
# ask only what lies wholly inside them)
BOTH = ("deny", "ask")
DENIED = [
    ("http://localh*:8080/", "http://localhost:8080/**", ("deny",)),
    ("http://localh*:8080/", "http://localhost:8080/", ("deny",)),
    ("http://localhost.:8080/", "http://localhost:8080/**", BOTH),
    ("http://localhost.:8080/", "localhost", BOTH),
    ("http://localhost:08080/", "http://localhost:8080/**", BOTH),
    ("http://localhost:8080/", "http://localhost:08080/**", BOTH),
    ("http://localhost:8080/", "http://localhost.:8080/**", BOTH),
    ("https://metadata.google.internal./computeMetadata/v1/x", "https://metadata.google.internal/**", BOTH),
    ("https://metadata.google.internal:0443/computeMetadata/v1/x", "https://metadata.google.internal/**", BOTH),
    ("https://METADATA.google.internal.:443/computeMetadata/v1/x", "https://metadata.google.internal/**", BOTH),
    ("metadata.google.internal.", "metadata.google.internal", BOTH),
    ("metadata.google.internal.:080", "metadata.google.internal:80", BOTH),
    ("metadata.google.internal.:080", "http://metadata.google.internal/**", ("deny",)),
]  # fmt: skip


@pytest.mark.parametrize(("declared", "rule", "actions"), DENIED)
def test_a_rule_on_a_host_names_every_spelling_a_connection_reads_as_it(
    declared: str, rule: str, actions: tuple[Any, ...]
) -> None:
    for action in actions:
        rules = ApprovalPolicy(
            (ApprovalRule(id="no-metadata", action=action, effect="network", targets=(rule,)),)
        )
        effect = network(declared)
        assert rules.decide("meta_value_get", [effect], reversible=True).verdict == action
        cases = approval_cases(
            "meta_value_get",
            [effect],
            reversible=True,
            approvals=rules,
            grant=Grant(effects=(network("**"),)),
        )
        assert {(c.verdict, c.rule) for c in cases} == {(action, "no-metadata")}


# (declared template, the form it is kept and listed in, arguments, the resolved target)
CANONICAL = [
    ("https://metadata.google.internal./computeMetadata/v1/{p}",
     "https://metadata.google.internal/computeMetadata/v1/{p}", {"p": "token"},
     "https://metadata.google.internal/computeMetadata/v1/token"),
    ("https://metadata.google.internal:0443/v1/{p}", "https://metadata.google.internal:443/v1/{p}",
     {"p": "token"}, "https://metadata.google.internal:443/v1/token"),
    ("http://localhost.:08080/{p}", "http://localhost:8080/{p}", {"p": "a"},
     "http://localhost:8080/a"),
    ("{h}.example.com.:{p}", "{h}.example.com:{p}", {"h": "api", "p": "0443"},
     "api.example.com:443"),
    ("*.example.com.", "*.example.com", {}, "*.example.com"),
]  # fmt: skip


@pytest.mark.parametrize(("template", "kept", "args", "target"), CANONICAL)
def test_a_declared_host_and_port_are_kept_as_a_connection_reads_them(
    template: str, kept: str, args: dict[str, str], target: str
) -> None:
    effect = network(template)
    assert str(effect) == f"network({kept})"  # what the inventory and the lock list
    assert effect == Effect.parse(f"network({template})") == network(kept)
    assert effect.resolve(args).target == target


# (declared target, what the refusal says): refused when the effect is built
REFUSED = [
    ("https://api.example.com:0{p}/v1", "port"),
    ("https://api.example.com:{p}443/v1", "port"),
    ("https://api.example.com:1{p}/v1", "port"),
    ("{h}:{p}{q}", "port"),
    ("api.example.com:8{p}", "port"),
    ("https://{h}:{p}.example.com/x", "port"),
    ("https://u:hunter2@api.example.com/v1", "password"),
    ("u:hunter2@api.example.com", "password"),
    ("https://u:hunter2@{h}/v1", "password"),
    ("https://api.example.com/v1/../admin", "segment"),
    ("https://api.example.com/v1/./admin", "segment"),
    ("https://api.example.com/v1/..", "segment"),
    ("https://api.example.com/v1/%2e%2e/admin", "escape"),
    ("https://api.example.com/v1/%2E./admin", "escape"),
    ("https://api.example.com/v1/%2fadmin", "escape"),
    ("https://api.example.com/v1/%5c../admin", "escape"),
    ("https://api.example.com/{p}/../admin", "segment"),
    ("https://api.example.com//admin", "empty segment"),
    ("http://localhost:0/{p}", "1-65535"),
    ("https://metadata.google.internal:0/computeMetadata/v1/{p}", "1-65535"),
    ("postgres://db.internal:0/{p}", "1-65535"),
    ("http://h.example.com:99999/x", "1-65535"),
    ("http://0x7f000001:3000/{p}", "IPv4"),
    ("http://2130706433/x", "IPv4"),
    ("http://127.1:80/x", "IPv4"),
    ("http://2852039166/latest/{p}", "IPv4"),
    ("0x7f000001", "IPv4"),
    ("169.254.43518:80", "IPv4"),
    ("https://api.example.com/v1//{p}", "empty segment"),
]  # fmt: skip


@pytest.mark.parametrize(("target", "why"), REFUSED)
def test_a_target_a_grant_cannot_judge_as_it_is_reached_is_refused_when_declared(
    target: str, why: str
) -> None:
    with pytest.raises(UsageError) as info:
        network(target)
    assert isinstance(info.value, ValueError)  # (a policy file names it at its line)
    assert info.value.code == "effect_target"
    assert info.value.retryable is False
    assert why in str(info.value)
    assert "hunter2" not in str(info.value)  # never printed
    if why != "password":
        assert repr(target) in str(info.value)


# declared targets that stay accepted, as written
ACCEPTED = [
    "http://127.0.0.1:8080/{p}",
    "10.0.0.1",
    "http://10.0.0.*/x",
    "https://api.example.com:{p}/v1",
    "{h}:{p}",
    "api.example.com:{p}",
    "https://deploy@backup.example.com/x",
    "https://{u}@api.example.com/x",
    "https://api.example.com/v1/..x",
    "https://api.example.com/v1/.well-known/x",
    "https://api.example.com/v1/%41",
    "https://api.example.com:8443/v1",
    "https://*.example.com/**",
    "unix:///run/app.sock",
    "**",
]  # fmt: skip


@pytest.mark.parametrize("target", ACCEPTED)
def test_a_target_already_as_a_connection_reads_it_is_kept_as_written(target: str) -> None:
    assert network(target).target == target


def test_a_rule_holding_a_password_or_a_dot_segment_is_refused_too() -> None:
    for target in ("https://u:hunter2@api.example.com/**", "https://api.example.com/v1/../**"):
        with pytest.raises(ValueError, match="targets"):
            ApprovalRule(id="r", action="deny", effect="network", targets=(target,))
