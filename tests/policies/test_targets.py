"""What a call reaches, as grants and approval rules judge it: URL values of ``network({url})``,
list placeholders (one effect per element), target patterns, and the precedence of rules.

Every table is the contract: a new form or rule adds a row."""

from __future__ import annotations

import itertools
import re
import tomllib
from typing import Any

import pytest

from airlock.policies import (
    ApprovalPolicy,
    ApprovalRule,
    Effect,
    EffectArgumentError,
    Grant,
    PolicyFileError,
    approval_cases,
    coverage,
    disclose,
    network,
    parse_policy,
    read,
    refusal,
    spend,
    target_classes,
    verdict_at,
    write,
)
from airlock.policies._network import network_covers, url_target

# -- URL values ----------------------------------------------------------------------------

# value of a {url} placeholder -> the target it reaches
URLS_ACCEPTED = [
    ("https://docs.example.com/guide/intro", "https://docs.example.com/guide/intro"),
    ("https://docs.example.com", "https://docs.example.com/"),
    ("HTTPS://Docs.Example.COM/A", "https://docs.example.com/A"),  # path case is kept
    ("https://docs.example.com:443/x", "https://docs.example.com/x"),  # default port dropped
    ("http://docs.example.com:80/x", "http://docs.example.com/x"),
    ("https://docs.example.com:8443/x", "https://docs.example.com:8443/x"),
    ("https://docs.example.com./x", "https://docs.example.com/x"),  # the root's dot
    ("https://docs.example.com/search?q=a&b=1#top", "https://docs.example.com/search"),
    ("https://docs.example.com/a%20b/~me/x.html", "https://docs.example.com/a%20b/~me/x.html"),
    ("https://10.0.0.1/x", "https://10.0.0.1/x"),
    ("docs.example.com", "docs.example.com"),  # one host name, as before
    # escapes of letters, digits, - _ ~ read as the server reads them (RFC 3986 6.2.2)
    ("https://docs.example.com/%61dmin/users", "https://docs.example.com/admin/users"),
    ("https://docs.example.com/adm%69n/%7Euser", "https://docs.example.com/admin/~user"),
    ("https://docs.example.com/%2D%5f%30", "https://docs.example.com/-_0"),
    ("https://docs.example.com/a%3ab%2a", "https://docs.example.com/a%3Ab%2A"),  # kept, upper
    # one host name, read as a URL's host
    ("metadata.google.internal.", "metadata.google.internal"),
    ("METADATA.Google.Internal", "metadata.google.internal"),
    ("x0x7f.example.com.", "x0x7f.example.com"),
]

# value -> a fragment of the refusal (what a grant could not judge the way a server reads it)
URLS_REFUSED: list[tuple[object, str]] = [
    ("https://docs.example.com@evil.example/", "user information"),
    ("https://user:pw@docs.example.com/", "user information"),
    ("https://docs.example.com\\@evil.example/", "user information"),
    ("https://[::1]/", "IPv6"),
    ("https://docs.example.com/a/../admin", "'..' segment"),
    ("https://docs.example.com/./a", "'.' or '..'"),
    ("https://docs.example.com//admin/users", "empty segment"),
    ("https://docs.example.com/a//b", "empty segment"),
    ("https://docs.example.com/a//", "empty segment"),
    ("https://docs.example.com/%2e%2e/admin", "percent-encoded"),
    ("https://docs.example.com/a%2Fb", "percent-encoded"),
    ("https://docs.example.com/a%5cb", "percent-encoded"),
    ("https://docs.example.com/a%00", "percent-encoded"),
    ("https://docs.example.com/a%zz", "path with characters"),
    ("https://docs.example.com/a*b", "no '*'"),
    ("https://docs.example.com/a\\b", "path with characters"),
    ("https://docs.example.com/a b", "white space"),
    ("https://docs.exämple.com/", "non-ASCII"),
    ("https://docs.example.com/\x00", "control"),
    ("https://evil.example\\.docs.example.com/", "not a host name"),
    ("https://*.example.com/", "not a host name"),
    ("https:///x", "not a host name"),
    ("https://docs.example.com:0/", "1-65535"),
    ("https://docs.example.com:99999/", "1-65535"),
    ("https://docs.example.com:http/", "1-65535"),
    ("https://" + "a" * 2100, "limit is 2048"),
    ("ftp//docs.example.com", "must be a URL"),
    ("docs.example.com/x", "must be a URL"),
    ("user@docs.example.com", "must be a URL"),
    ("", "must be a URL"),
    # an IPv4 address in a spelling other than four decimal numbers (inet_aton, WHATWG)
    ("http://2130706433/", "IPv4"),  # 127.0.0.1
    ("http://0x7f000001/", "IPv4"),
    ("http://0177.0.0.1/", "IPv4"),
    ("http://127.1/", "IPv4"),
    ("http://0x7f.1/", "IPv4"),
    ("http://127.000.000.001/", "IPv4"),
    ("http://2852039166/latest", "IPv4"),  # 169.254.169.254
    ("http://0xa9fea9fe/", "IPv4"),
    ("http://0251.0376.0251.0376/", "IPv4"),
    ("http://169.254.43518/", "IPv4"),
    ("http://169.254.169.254.0/", "IPv4"),
    ("http://1.2.3.256/", "IPv4"),
    ("http://0x/", "IPv4"),
    ("http://docs.example.123/", "IPv4"),  # a numeric last label is an address to WHATWG
    ("http://2130706433.:8080/", "IPv4"),
    # one host name: the same rules as a URL's host
    ("2130706433", "IPv4"),
    ("0x7f.1", "IPv4"),
    ("169.254.43518.", "IPv4"),
    (2130706433, "must be a URL"),  # a number is not a host name
    ("docs.example.com\n", "must be a URL"),
    ("a+b.example", "must be a URL"),
    ("docs..example.com", "not a host name"),
    ("-docs.example.com", "not a host name"),
    ("x" * 64 + ".example", "not a host name"),
]


@pytest.mark.parametrize(("value", "target"), URLS_ACCEPTED)
def test_a_url_value_resolves_to_the_target_it_reaches(value: str, target: str) -> None:
    (effect,) = network("{url}").resolve_all({"url": value})
    assert effect == network(target)


@pytest.mark.parametrize(("value", "fragment"), URLS_REFUSED)
def test_a_url_a_grant_cannot_judge_is_refused(value: object, fragment: str) -> None:
    with pytest.raises(EffectArgumentError) as info:
        network("{url}").resolve({"url": value})
    assert info.value.field == "url"
    assert fragment in info.value.reason


def test_url_target_never_holds_a_wildcard() -> None:
    for value, _ in URLS_ACCEPTED:
        if "://" in value:
            assert "*" not in url_target(value)


def test_only_a_whole_network_target_takes_a_url() -> None:
    assert network("{url}").takes_url
    assert network("{urls[]}").takes_url
    assert not network("https://{host}/docs").takes_url
    assert not disclose("{to}").takes_url
    assert network("{url}").pattern == "**"  # any URL the grant allows
    assert network("https://{host}/docs").pattern == "https://*/docs"
    with pytest.raises(EffectArgumentError):  # a segment is still one segment
        network("https://{host}/docs").resolve({"host": "https://evil.example/"})


# (declared network target, arguments, the target it resolves to): a placeholder in the
# host fills it as a URL's host is read
HOSTS_FILLED = [
    (network("https://{host}/docs"), {"host": "METADATA.google.internal."},
     "https://metadata.google.internal/docs"),
    (network("https://{host}:8443/docs"), {"host": "Docs.Example.com."},
     "https://docs.example.com:8443/docs"),
    (network("{host}"), {"host": "Docs.Example.com."}, "docs.example.com"),  # a whole value
    (network("{sub}.example.com"), {"sub": "A"}, "a.example.com"),
]  # fmt: skip

# (declared network target, arguments, the field named, a fragment of the reason)
HOSTS_REFUSED = [
    (network("https://{host}/docs"), {"host": "2130706433"}, "host", "'2130706433'"),
    (network("https://{host}/docs"), {"host": "127.1"}, "host", "IPv4"),
    (network("https://{a}.{b}/docs"), {"a": "127", "b": "1"}, "a", "'127.1'"),
    (network("{host}:8080"), {"host": "0x7f000001"}, "host", "IPv4"),
    (network("https://api.{zone}/x"), {"zone": "0x7f"}, "zone", "IPv4"),
]


@pytest.mark.parametrize(("effect", "args", "target"), HOSTS_FILLED)
def test_a_placeholder_in_a_host_fills_it_as_a_url_host_is_read(
    effect: Effect, args: dict[str, Any], target: str
) -> None:
    assert effect.resolve_all(args) == (network(target),)
    assert effect.resolver()(args) == (network(target),)


@pytest.mark.parametrize(("effect", "args", "field", "fragment"), HOSTS_REFUSED)
def test_a_host_a_placeholder_makes_an_ipv4_spelling_is_refused(
    effect: Effect, args: dict[str, Any], field: str, fragment: str
) -> None:
    for resolve in (effect.resolve_all, effect.resolver()):
        with pytest.raises(EffectArgumentError) as info:
            resolve(args)
        assert (info.value.field, fragment in info.value.reason) == (field, True)


# -- network targets against grant patterns -------------------------------------------------

# (grant pattern, target or declared pattern, covered)
NETWORK_COVERS = [
    # a host pattern allows every scheme, port and path on its hosts
    ("docs.example.com", "https://docs.example.com/a/b", True),
    ("docs.example.com", "http://docs.example.com:8080/", True),
    ("docs.example.com", "docs.example.com", True),
    ("docs.example.com", "https://docs.example.com.evil.example/", False),
    ("*.example.com", "https://docs.example.com/x", True),
    ("*.example.com", "https://example.com/x", False),
    ("*", "https://anything.example/x", True),
    ("**", "https://anything.example/x", True),
    # a URL pattern judges each part it names
    ("https://docs.example.com/**", "https://docs.example.com/guide/intro", True),
    ("https://docs.example.com/**", "https://docs.example.com/", True),  # the root
    ("https://docs.example.com/**", "http://docs.example.com/guide", False),  # scheme
    ("https://docs.example.com/**", "https://docs.example.com:8443/guide", False),  # port
    ("https://docs.example.com/**", "https://evil.example/docs.example.com/", False),
    ("https://docs.example.com/**", "docs.example.com", False),  # scheme unknown
    ("https://docs.example.com/guide/*", "https://docs.example.com/guide/intro", True),
    ("https://docs.example.com/guide/*", "https://docs.example.com/guide/a/b", False),
    ("https://docs.example.com/guide/**", "https://docs.example.com/guide", True),
    ("https://docs.example.com/guide/**", "https://docs.example.com/guidebook", False),
    ("https://docs.example.com:443/**", "https://docs.example.com/x", True),  # default port
    ("https://docs.example.com:8443/**", "https://docs.example.com/x", False),
    ("https://docs.example.com:*/**", "https://docs.example.com:8443/x", True),
    ("docs.example.com:8443", "https://docs.example.com:8443/x", True),
    ("docs.example.com:8443", "https://docs.example.com/x", False),
    ("https://docs.example.com", "https://docs.example.com/any/path", True),  # no path: any
    ("https://*.example.com/**", "https://a.example.com/x", True),
    # declared patterns (what a tool may reach) against grants
    ("https://docs.example.com/**", "**", False),  # network({url}): partial at best
    ("**", "**", True),
    ("https://docs.example.com/**", "https://docs.example.com/*", True),
    ("https://docs.example.com/*", "https://docs.example.com/**", False),
]


@pytest.mark.parametrize(("pattern", "target", "covered"), NETWORK_COVERS)
def test_network_targets_are_judged_part_by_part(pattern: str, target: str, covered: bool) -> None:
    assert network_covers(pattern, target) is covered
    assert Grant(effects=(network(pattern),)).covers(Effect("network", target)) is covered


def test_a_url_tool_is_partly_covered_by_the_urls_a_grant_lists() -> None:
    docs = Grant(effects=(network("https://docs.example.com/**"),))
    assert coverage(docs, network("{url}")) == "partial"
    assert coverage(Grant(effects=(network("**"),)), network("{url}")) == "full"
    assert coverage(Grant(effects=(read("web:page/*"),)), network("{url}")) == "none"
    (inside,) = network("{url}").resolve_all({"url": "https://docs.example.com/a"})
    (outside,) = network("{url}").resolve_all({"url": "https://docs.example.com.evil/a"})
    assert docs.covers(inside)
    assert not docs.covers(outside)


# -- list placeholders ----------------------------------------------------------------------

# (effect, arguments, the targets it resolves to)
LISTS = [
    (disclose("email:{to[]}"), {"to": ["ann@acme.com", "raj@acme.com"]},
     ["email:ann@acme.com", "email:raj@acme.com"]),
    (disclose("email:{to[]}"), {"to": ["ann@acme.com", "ann@acme.com"]},
     ["email:ann@acme.com"]),  # one effect per distinct target
    (disclose("email:{to[]}"), {"to": []}, []),
    (read("crm:{kind}/{ids[]}"), {"kind": "customer", "ids": ["c_1", 2]},
     ["crm:customer/c_1", "crm:customer/2"]),
    (network("{urls[]}"), {"urls": ["https://a.example/x", "b.example"]},
     ["https://a.example/x", "b.example"]),
]  # fmt: skip


@pytest.mark.parametrize(("effect", "args", "targets"), LISTS)
def test_a_list_placeholder_declares_one_effect_per_element(
    effect: Effect, args: dict[str, Any], targets: list[str]
) -> None:
    resolved = effect.resolve_all(args)
    assert [e.target for e in resolved] == targets
    assert all(e.kind == effect.kind and not e.placeholders for e in resolved)
    assert effect.each is not None
    assert effect.pattern.count("*") == (2 if effect.takes_url else 1) * len(effect.placeholders)


# (effect, arguments, the field named, a fragment of the reason)
LISTS_REFUSED = [
    (disclose("email:{to[]}"), {"to": "ann@acme.com"}, "to", "must be a list"),
    (disclose("email:{to[]}"), {}, "to", "required"),
    (disclose("email:{to[]}"), {"to": ["ann@acme.com", "../x"]}, "to", "one id segment"),
    (disclose("email:{to[]}"), {"to": ["eve@evil.com@acme.com"]}, "to", "at most one '@'"),
    # the "@" of the template and of the value together: one segment, two "@"
    (
        disclose("email:{local[]}@acme.com"),
        {"local": ["ann", "eve@evil.example"]},
        "local",
        "at most one '@'",
    ),
    (disclose("email:{to[]}"), {"to": ["ann@acme.com", "eve@acme..com"]}, "to", "empty label"),
    (disclose("email:{to[]}"), {"to": ["a@acme.com"] * 1001}, "to", "at most 1000"),
    (disclose("email:{to}"), {"to": ["ann@acme.com"]}, "to", "one id segment"),
    (network("{urls[]}"), {"urls": ["https://x.example@evil.example/"]}, "urls", "user info"),
]


@pytest.mark.parametrize(("effect", "args", "field", "fragment"), LISTS_REFUSED)
def test_a_list_value_that_cannot_stand_in_a_target_is_refused(
    effect: Effect, args: dict[str, Any], field: str, fragment: str
) -> None:
    with pytest.raises(EffectArgumentError) as info:
        effect.resolve_all(args)
    assert (info.value.field, fragment in info.value.reason) == (field, True)


# -- e-mail addresses and "@" -----------------------------------------------------------------

# (declared target, arguments, the targets it resolves to): an e-mail domain is read as a mail
# server reads it (lower case, the root's dot dropped); the local part is kept
MAIL_FILLED = [
    (disclose("email:{to}"), {"to": "bob@Competitor.com"}, ["email:bob@competitor.com"]),
    (disclose("email:{to}"), {"to": "bob@COMPETITOR.COM"}, ["email:bob@competitor.com"]),
    (disclose("email:{to}"), {"to": "bob@competitor.com."}, ["email:bob@competitor.com"]),
    (disclose("email:{to}"), {"to": "Bob@Acme.com"}, ["email:Bob@acme.com"]),
    (disclose("email:{to[]}"), {"to": ["a@X.example", "b@x.example."]},
     ["email:a@x.example", "email:b@x.example"]),
    (disclose("email:{local}@Acme.COM"), {"local": "ann"}, ["email:ann@acme.com"]),
]  # fmt: skip

# (declared target, arguments, the field named, a fragment of the reason): no value may
# leave two "@" in its segment, whatever the template puts around it
SEGMENTS_REFUSED = [
    (disclose("email:{local}@acme.com"), {"local": "eve@evil.example"}, "local",
     "at most one '@'"),
    (read("crm:user/{local}@acme.com"), {"local": "eve@evil.example"}, "local",
     "at most one '@'"),
    (read("crm:user/{local}@{domain}"), {"local": "eve@evil.example", "domain": "acme.com"},
     "local", "at most one '@'"),
    (read("crm:user/{local}@{domain}"), {"local": "eve", "domain": "evil.example@acme.com"},
     "local", "at most one '@'"),
    (disclose("email:{to}"), {"to": "bob@competitor..com"}, "to", "empty label"),
    (disclose("email:{to}"), {"to": "bob@"}, "to", "empty label"),
    (disclose("email:{to}"), {"to": "bob@competitor.com.."}, "to", "empty label"),
]  # fmt: skip


@pytest.mark.parametrize(("effect", "args", "targets"), MAIL_FILLED)
def test_an_email_domain_is_read_as_a_mail_server_reads_it(
    effect: Effect, args: dict[str, Any], targets: list[str]
) -> None:
    for resolve in (effect.resolve_all, effect.resolver()):
        assert [e.target for e in resolve(args)] == targets


@pytest.mark.parametrize(("effect", "args", "field", "fragment"), SEGMENTS_REFUSED)
def test_a_value_that_leaves_two_at_signs_in_its_segment_is_refused(
    effect: Effect, args: dict[str, Any], field: str, fragment: str
) -> None:
    for resolve in (effect.resolve_all, effect.resolver()):
        with pytest.raises(EffectArgumentError) as info:
            resolve(args)
        assert (info.value.field, fragment in info.value.reason) == (field, True)


def test_a_rule_names_an_email_domain_however_it_is_written() -> None:
    grant = Grant(effects=(disclose("email:*@Acme.COM."),))
    assert grant.covers(disclose("email:ann@acme.com"))
    assert not grant.covers(disclose("email:ann@acme.com.evil"))


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda: disclose("email:{a[]}/{b[]}"), "one list placeholder"),
        (lambda: read("crm:x/{a[]}/{a}"), "both as a list"),
        (lambda: spend("{amounts[]}"), "must be an integer or '{field}'"),
        (lambda: read("crm:x/{a[}"), "placeholders"),
    ],
)
def test_list_placeholders_that_cannot_expand_are_refused(build: Any, fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        build()


def test_resolve_of_a_list_effect_points_to_resolve_all() -> None:
    with pytest.raises(EffectArgumentError, match="resolve_all"):
        disclose("email:{to[]}").resolve({"to": ["a@acme.com"]})


def test_a_grant_allows_some_elements_and_refuses_the_rest() -> None:
    grant = Grant(effects=(disclose("email:*@acme.com"),))
    resolved = disclose("email:{to[]}").resolve_all({"to": ["ann@acme.com", "eve@evil.com"]})
    assert grant.uncovered(resolved) == disclose("email:eve@evil.com")
    assert grant.uncovered(resolved[:1]) is None
    assert Effect.parse(str(disclose("email:{to[]}"))) == disclose("email:{to[]}")


# -- rules on targets -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"targets": ["docs.example.com"]}, "targets need an effect kind"),
        ({"effect": "network", "targets": []}, "at least 1"),
        ({"effect": "network", "targets": ["https://{host}/x"]}, "has a placeholder"),
        ({"effect": "read", "targets": ["invoice/1"]}, "service:object"),
        ({"effect": "network", "targets": ["evil host"]}, "1-256 characters"),
        ({"effect": "spend", "targets": ["usd"]}, "its currency"),
        ({"effect": "spend", "targets": ["ÜSD"]}, "its currency"),
        ({"effect": "disclose", "targets": "email:*@evil.com"}, "not one string"),
    ],
)
def test_rules_with_targets_that_cannot_match_are_refused(
    data: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        ApprovalRule.model_validate({"id": "r", "action": "allow", **data})


DOCS = ApprovalRule(
    id="docs",
    action="allow",
    effect="network",
    targets=("https://docs.example.com/**", "*.python.org"),
)
OTHER_HOSTS = ApprovalRule(id="other-hosts", action="ask", effect="network")
NO_EVIL = ApprovalRule(id="no-evil", action="deny", effect="network", targets=("*.evil.example",))
NO_METADATA = ApprovalRule(
    id="no-metadata", action="deny", effect="network", targets=("metadata.google.internal",)
)
NO_ADMIN = ApprovalRule(
    id="no-admin", action="deny", effect="network", targets=("https://docs.example.com/admin/**",)
)
DENY_NETWORK = ApprovalRule(id="no-network", action="deny", effect="network")
ASK_FETCH = ApprovalRule(id="ask-fetch", action="ask", tools=("web_page_fetch",))
ACME_MAIL = ApprovalRule(
    id="acme-mail", action="allow", effect="disclose", targets=("email:*@acme.com",)
)
ASK_MAIL = ApprovalRule(id="ask-mail", action="ask", effect="disclose")
NO_COMPETITOR = ApprovalRule(
    id="no-competitor", action="deny", effect="disclose", targets=("email:*@competitor.com",)
)
NO_COMPETITOR_CAPS = ApprovalRule(
    id="no-competitor-caps", action="deny", effect="disclose", targets=("email:*@Competitor.COM",)
)
ANY_MAIL = ApprovalRule(id="any-mail", action="allow", effect="disclose")
SEND_OK = ApprovalRule(id="send-ok", action="allow", tools=("mail_message_send",))
ASK_USD = ApprovalRule(
    id="usd-big", action="ask", effect="spend", targets=("USD",), min_amount=10_000
)
ALLOW_REFUNDS = ApprovalRule(id="refunds", action="allow", tools=("billing_refund_*",))
ASK_CDN = ApprovalRule(id="ask-cdn", action="ask", effect="network", targets=("*.cdn.example",))
ONE_CDN = ApprovalRule(id="one-cdn", action="allow", effect="network", targets=("a.cdn.example",))
SAME_CDN = ApprovalRule(id="same-cdn", action="allow", effect="network", targets=("*.cdn.example",))
NO_SECRET = ApprovalRule(
    id="no-secret", action="deny", effect="read", targets=("billing:invoice/secret_*",)
)
NO_INTERNAL = ApprovalRule(
    id="no-internal", action="deny", effect="network", targets=("internal.example.com",)
)
NO_CEO = ApprovalRule(
    id="no-ceo", action="deny", effect="disclose", targets=("email:ceo@acme.com",)
)
NO_BOB_CAPS = ApprovalRule(
    id="no-bob", action="deny", effect="disclose", targets=("email:bob@Competitor.COM",)
)
NO_METADATA_DOT = ApprovalRule(
    id="no-metadata-dot", action="deny", effect="network", targets=("metadata.google.internal.",)
)
NO_BIG_EUR = ApprovalRule(
    id="no-big-eur", action="deny", effect="spend", targets=("EUR",), min_amount=100_000
)


def fetch(*urls: str) -> tuple[Effect, ...]:
    return (read("web:page/*"), *network("{urls[]}").resolve_all({"urls": list(urls)}))


def mail(*to: str) -> tuple[Effect, ...]:
    return (write("mail:outbox/*"), *disclose("email:{to[]}").resolve_all({"to": list(to)}))


# (rules, tool, the call's effects, verdict, deciding rule): the precedence as a table
PRECEDENCE: list[tuple[str, tuple[ApprovalRule, ...], str, tuple[Effect, ...], str, str]] = [
    # 2 over 3: a target allow carves out of a broader ask of the same kind
    ("carve-out", (DOCS, OTHER_HOSTS), "web_page_fetch",
     fetch("https://docs.example.com/a"), "allow", "docs"),
    ("carve-out, other host", (DOCS, OTHER_HOSTS), "web_page_fetch",
     fetch("https://evil.example/a"), "ask", "other-hosts"),
    ("carve-out, host pattern", (DOCS, OTHER_HOSTS), "web_page_fetch",
     fetch("https://www.python.org/doc"), "allow", "docs"),
    ("carve-out, wrong scheme", (DOCS, OTHER_HOSTS), "web_page_fetch",
     fetch("http://docs.example.com/a"), "ask", "other-hosts"),
    ("one effect outside decides", (DOCS, OTHER_HOSTS), "web_page_fetch",
     fetch("https://docs.example.com/a", "https://evil.example/"), "ask", "other-hosts"),
    ("the order of rules does not matter", (OTHER_HOSTS, DOCS), "web_page_fetch",
     fetch("https://docs.example.com/a"), "allow", "docs"),
    # a rule on the tool itself judges what is left: here the read (carve out of a rule on
    # the same kind, as above, to let the named hosts through)
    ("a tool rule judges the rest", (ASK_FETCH, DOCS), "web_page_fetch",
     fetch("https://docs.example.com/a"), "ask", "ask-fetch"),
    ("nothing left for the tool rule", (ASK_FETCH, DOCS), "web_page_fetch",
     network("{url}").resolve_all({"url": "https://docs.example.com/a"}), "allow", "docs"),
    ("nothing left: the tool rule judges a call without effects", (ASK_FETCH,),
     "web_page_fetch", (), "ask", "ask-fetch"),
    # among target rules, the narrowest pattern decides; as narrow ones: the strictest
    ("narrower target carves out", (ASK_CDN, ONE_CDN), "web_page_fetch",
     fetch("https://a.cdn.example/x"), "allow", "one-cdn"),
    ("narrower target, other host", (ASK_CDN, ONE_CDN), "web_page_fetch",
     fetch("https://b.cdn.example/x"), "ask", "ask-cdn"),
    ("as narrow: the strictest", (SAME_CDN, ASK_CDN), "web_page_fetch",
     fetch("https://a.cdn.example/x"), "ask", "ask-cdn"),
    # 1: nothing carves out of a deny
    ("deny by target", (DOCS, NO_EVIL, OTHER_HOSTS), "web_page_fetch",
     fetch("https://x.evil.example/"), "deny", "no-evil"),
    ("deny by target among allowed", (DOCS, NO_EVIL), "web_page_fetch",
     fetch("https://docs.example.com/a", "https://x.evil.example/"), "deny", "no-evil"),
    ("broad deny is not carved out", (DOCS, DENY_NETWORK), "web_page_fetch",
     fetch("https://docs.example.com/a"), "deny", "no-network"),
    ("deny names a host value with a final dot", (NO_METADATA,), "web_page_fetch",
     fetch("metadata.google.internal."), "deny", "no-metadata"),
    ("deny names a host value in capitals", (DOCS, NO_METADATA), "web_page_fetch",
     fetch("METADATA.google.internal."), "deny", "no-metadata"),
    ("deny names a path with escaped letters", (DOCS, NO_ADMIN), "web_page_fetch",
     fetch("https://docs.example.com/%61dmin/users"), "deny", "no-admin"),
    ("deny names a path with escaped letters, lower", (NO_ADMIN,), "web_page_fetch",
     fetch("https://docs.example.com/adm%69n"), "deny", "no-admin"),
    # a deny names what an effect whose target is a pattern *may* reach
    ("deny names a listing that may reach it", (NO_SECRET,), "billing_invoice_list",
     (read("billing:invoice/*"),), "deny", "no-secret"),
    ("deny names a wider listing", (NO_SECRET,), "billing_export_make",
     (read("billing:**"),), "deny", "no-secret"),
    ("deny names a host pattern that may reach it", (DOCS, NO_INTERNAL), "web_site_crawl",
     (network("https://*.example.com/**"),), "deny", "no-internal"),
    ("deny names any URL", (NO_INTERNAL,), "web_site_crawl",
     (network("**"),), "deny", "no-internal"),
    ("deny names every path of a host value", (DOCS, NO_ADMIN), "web_page_fetch",
     fetch("docs.example.com"), "deny", "no-admin"),
    # 4: the default for what no rule judged
    ("default for reads and network", (), "web_page_fetch",
     fetch("https://evil.example/"), "allow", "default"),
    ("default: a target rule's kind only", (ACME_MAIL,), "mail_message_send",
     mail("ann@acme.com"), "ask", "default"),  # the write is left to the default
    ("e-mail inside acme", (ACME_MAIL, ASK_MAIL, SEND_OK), "mail_message_send",
     mail("ann@acme.com", "raj@acme.com"), "allow", "acme-mail"),
    ("e-mail outside acme", (ACME_MAIL, ASK_MAIL, SEND_OK), "mail_message_send",
     mail("ann@acme.com", "eve@evil.com"), "ask", "ask-mail"),
    ("no recipients", (ACME_MAIL, ASK_MAIL, SEND_OK), "mail_message_send",
     mail(), "allow", "send-ok"),
    # a deny by e-mail domain names every spelling of the domain
    ("deny by domain, capitals", (NO_COMPETITOR, ANY_MAIL, SEND_OK), "mail_message_send",
     mail("bob@Competitor.com"), "deny", "no-competitor"),
    ("deny by domain, all capitals", (NO_COMPETITOR, ANY_MAIL, SEND_OK), "mail_message_send",
     mail("ann@acme.com", "bob@COMPETITOR.COM"), "deny", "no-competitor"),
    ("deny by domain, the root's dot", (NO_COMPETITOR, ANY_MAIL, SEND_OK), "mail_message_send",
     mail("bob@competitor.com."), "deny", "no-competitor"),
    ("deny by a domain written in capitals", (NO_COMPETITOR_CAPS, ANY_MAIL, SEND_OK),
     "mail_message_send", mail("bob@competitor.com"), "deny", "no-competitor-caps"),
    ("deny by domain in capitals, a pattern that may reach it", (NO_BOB_CAPS, ANY_MAIL, SEND_OK),
     "mail_message_send", (write("mail:outbox/*"), disclose("email:*@competitor.com")),
     "deny", "no-bob"),
    # a deny on one mailbox names what a server delivers to it: any case, any +tag
    ("deny by mailbox, capitals", (NO_CEO, ANY_MAIL, SEND_OK), "mail_message_send",
     mail("CEO@acme.com"), "deny", "no-ceo"),
    ("deny by mailbox, mixed case", (NO_CEO, ANY_MAIL, SEND_OK), "mail_message_send",
     mail("ann@acme.com", "Ceo@acme.com"), "deny", "no-ceo"),
    ("deny by mailbox, a +tag", (NO_CEO, ANY_MAIL, SEND_OK), "mail_message_send",
     mail("ceo+x@acme.com"), "deny", "no-ceo"),
    ("deny by mailbox, a +tag in capitals and the root's dot", (NO_CEO, ANY_MAIL, SEND_OK),
     "mail_message_send", mail("CEO+Board@ACME.com."), "deny", "no-ceo"),
    ("deny by mailbox, a pattern spelled in capitals", (NO_CEO, ANY_MAIL, SEND_OK),
     "mail_message_send", (write("mail:outbox/*"), disclose("email:CEO*@acme.com")),
     "deny", "no-ceo"),
    # a rule's host is read as a URL's host is: the root's dot dropped
    ("deny by a host written with the root's dot", (NO_METADATA_DOT,), "web_page_fetch",
     fetch("http://metadata.google.internal/computeMetadata/v1"), "deny", "no-metadata-dot"),
    # a target rule's amount condition holds or it names nothing
    ("target rule with an amount: under", (ASK_USD, ALLOW_REFUNDS), "billing_refund_create",
     (write("billing:refund/1"), spend(5_000)), "allow", "refunds"),
    ("target rule with an amount: over", (ASK_USD, ALLOW_REFUNDS), "billing_refund_create",
     (write("billing:refund/1"), spend(50_000)), "ask", "usd-big"),
    ("target rule with an amount: other currency", (ASK_USD, ALLOW_REFUNDS),
     "billing_refund_create", (write("billing:refund/1"), spend(50_000, currency="EUR")),
     "allow", "refunds"),
    ("target rule with an amount: the call's spends add up", (ASK_USD, ALLOW_REFUNDS),
     "billing_refund_create", (write("billing:refund/1"), spend(6_000), spend(6_000)),
     "ask", "usd-big"),
    # a rule on spends with targets adds up the spends in its currencies only
    ("target rule with an amount: another currency's spend not counted",
     (ASK_USD, ALLOW_REFUNDS), "billing_refund_create",
     (write("billing:refund/1"), spend(9_000), spend(20_000, currency="EUR")),
     "allow", "refunds"),
    ("target deny with an amount: another currency's spend not counted",
     (NO_BIG_EUR, ALLOW_REFUNDS), "billing_refund_create",
     (write("billing:refund/1"), spend(1, currency="EUR"), spend(200_000)),
     "allow", "refunds"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rules", "tool", "effects", "verdict", "rule"),
    [row[1:] for row in PRECEDENCE],
    ids=[row[0] for row in PRECEDENCE],
)
def test_rule_precedence(
    rules: tuple[ApprovalRule, ...],
    tool: str,
    effects: tuple[Effect, ...],
    verdict: str,
    rule: str,
) -> None:
    decision = ApprovalPolicy(rules).decide(tool, effects, reversible=True)
    assert (decision.verdict, decision.rule_id) == (verdict, rule)
    assert decision.reason


@pytest.mark.parametrize(
    ("rules", "tool", "effects", "verdict"),
    [row[1:5] for row in PRECEDENCE if len(row[1]) > 1],
    ids=[row[0] for row in PRECEDENCE if len(row[1]) > 1],
)
def test_no_order_of_the_rules_changes_a_verdict(
    rules: tuple[ApprovalRule, ...], tool: str, effects: tuple[Effect, ...], verdict: str
) -> None:
    for order in itertools.permutations(rules):
        assert ApprovalPolicy(order).decide(tool, effects, reversible=True).verdict == verdict


def test_the_reason_names_the_effect_a_target_rule_decided() -> None:
    decision = ApprovalPolicy((DOCS, OTHER_HOSTS)).decide(
        "web_page_fetch", fetch("https://evil.example/a"), reversible=True
    )
    assert decision.reason == "rule 'other-hosts' (ask) for network(https://evil.example/a)"


# -- the inventory's view: verdicts by target class -----------------------------------------

EVERYWHERE = Grant(effects=(read("web:page/*"), network("**"), disclose("email:**")))


def test_approval_cases_tell_target_classes_apart() -> None:
    cases = approval_cases(
        "web_page_fetch",
        (read("web:page/*"), network("{url}")),
        reversible=True,
        approvals=ApprovalPolicy((DOCS, OTHER_HOSTS)),
        grant=EVERYWHERE,
    )
    found = {(c.targets, c.verdict, c.rule) for c in cases}
    assert found == {
        (("network(*.python.org)",), "allow", "docs"),
        (("network(https://docs.example.com/**)",), "allow", "docs"),
        ((), "ask", "other-hosts"),
    }
    assert verdict_at(cases, 0, ("network(*.python.org)",)) == "allow"
    assert verdict_at(cases, 0) == "ask"
    assert verdict_at(cases, 0, ("network(unknown.example)",)) == "ask"  # as every other
    assert target_classes(cases)[0] == ()


@pytest.mark.parametrize(
    "rules",
    [
        (ACME_MAIL, OTHER_HOSTS),  # a target rule of another kind
        (  # a pattern the declared one cannot reach
            ApprovalRule(id="py", action="allow", effect="network", targets=("*.python.org",)),
            OTHER_HOSTS,
        ),
    ],
)
def test_only_target_rules_that_can_name_the_effect_make_classes(
    rules: tuple[ApprovalRule, ...],
) -> None:
    cases = approval_cases(
        "web_docs_get",
        (network("https://docs.example.com/{page}"),),
        reversible=True,
        approvals=ApprovalPolicy(rules),
        grant=EVERYWHERE,
    )
    assert [(c.targets, c.verdict) for c in cases] == [((), "ask")]


def test_a_fixed_target_is_decided_exactly() -> None:
    cases = approval_cases(
        "web_docs_get",
        (network("https://docs.example.com/guide"),),
        reversible=True,
        approvals=ApprovalPolicy((DOCS, OTHER_HOSTS)),
        grant=EVERYWHERE,
    )
    assert [(c.targets, c.verdict, c.rule) for c in cases] == [((), "allow", "docs")]


def test_a_listing_that_may_reach_a_denied_target_is_denied_in_every_class() -> None:
    # Every call of the listing reads billing:invoice/secret_*, whatever its arguments: the
    # inventory says so, and a session does not offer the tool.
    effects = (read("billing:invoice/*"),)
    grant = Grant(scopes=frozenset({"billing.read"}), effects=effects)
    cases = approval_cases(
        "billing_invoice_list",
        effects,
        reversible=True,
        approvals=ApprovalPolicy((NO_SECRET,)),
        grant=grant,
    )
    assert {(c.verdict, c.rule) for c in cases} == {("deny", "no-secret")}
    assert refusal("billing.read", effects, cases, grant) == (
        "approval rule(s) no-secret deny every call"
    )


def test_approval_cases_without_target_rules_are_unchanged() -> None:
    cases = approval_cases(
        "billing_refund_create",
        (write("billing:refund/*"), spend("{amount}")),
        reversible=False,
        approvals=ApprovalPolicy((ALLOW_REFUNDS,)),
        grant=Grant(spend_limits={"USD": 1000}),
    )
    assert [(c.from_amount, c.verdict, c.rule, c.targets) for c in cases] == [
        (0, "allow", "refunds", ()),
        (1001, "deny", "spend_limit", ()),
    ]
    assert "targets" not in cases[0].model_dump()  # the lock file's form is unchanged


# -- policy files ---------------------------------------------------------------------------

POLICY = """
version = 1

[roles.web_reader]
scopes = ["web.read"]
effects = ["read(web:page/*)", "network(https://docs.example.com/**)", "network(*.python.org)"]

[[roles.web_reader.rules]]
id = "docs-hosts"
action = "allow"
effect = "network"
targets = ["https://docs.example.com/**", "*.python.org"]

[[roles.web_reader.rules]]
id = "other-hosts"
action = "ask"
effect = "network"

[principals."*"]
roles = ["web_reader"]
"""


def test_a_policy_file_holds_rules_on_targets() -> None:
    policy = parse_policy(POLICY)
    rules = policy.role_approvals("web_reader")
    (effect,) = network("{url}").resolve_all({"url": "https://www.python.org/"})
    decision = rules.decide("web_page_fetch", (effect,), reversible=True)
    assert (decision.verdict, decision.rule_id) == ("allow", "docs-hosts")


@pytest.mark.parametrize(
    ("old", "new", "key", "fragment"),
    [
        ('effect = "network"\ntargets', "targets", "roles.web_reader.rules[0]", "need an effect"),
        (
            '"*.python.org"]\n\n[[',
            '"https://{x}/"]\n\n[[',
            "roles.web_reader.rules[0]",
            "placeholder",
        ),
        ("targets = [", "target = [", "roles.web_reader.rules[0].target", "unknown key"),
    ],
)
def test_malformed_rules_on_targets_name_the_key(
    old: str, new: str, key: str, fragment: str
) -> None:
    assert old in POLICY
    with pytest.raises(PolicyFileError) as info:
        parse_policy(POLICY.replace(old, new, 1), source="web.toml")
    assert info.value.key == key
    assert fragment in info.value.reason


def test_the_policy_file_docstring_example_parses() -> None:
    import airlock.policies._policy_file as module

    assert module.__doc__ is not None
    lines = module.__doc__.split("Format (``version = 1``)::\n", 1)[1].splitlines()
    example = []
    for line in lines:
        if line and not line.startswith("    "):
            break
        example.append(line[4:])
    data = tomllib.loads("\n".join(example))
    assert data["roles"]["web_reader"]["rules"][0]["targets"]
