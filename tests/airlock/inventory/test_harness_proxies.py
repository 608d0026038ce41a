"""The proxies the harness's own requests go through: listed for each endpoint a proxy
variable applies to, as the model client (httpx) and the OTLP exporter (requests) apply them,
so a proxy that starts carrying them fails the lock check."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import requests.utils

from airlock.inventory import HarnessConnection, harness_connections

MODEL = "https://api.anthropic.com/v1/messages"
COLLECTOR = "http://collector.example.net:4318/v1/traces"
A = "http://proxy-a.example:3128"
B = "http://proxy-b.example:3128"


Shown = tuple[str, str, str | None]


def _proxies(
    environ: dict[str, str], *, docker_host: str | None = None, spans: str = COLLECTOR
) -> dict[str, Shown]:
    found = harness_connections(
        home=Path("/srv/airlock"),
        model_endpoint=MODEL,
        model_credential="ANTHROPIC_API_KEY",
        mcp_host="127.0.0.1",
        docker_host=docker_host,
        spans_endpoint=spans,
        environ=environ,
    )
    assert "secret" not in " ".join(c.model_dump_json() for c in found)
    return {c.name: _shown(c) for c in found if c.name.startswith("proxy")}


def _shown(connection: HarnessConnection) -> Shown:
    assert connection.direction == "outbound"
    assert connection.target == connection.locked_as
    return connection.kind, connection.target, connection.credential


MODEL_VIA = "proxy for model provider"
SPANS_VIA = "proxy for audit spans"

# environment -> the proxies listed: name -> (kind, where, credential)
PROXIES: dict[str, tuple[dict[str, str], dict[str, Shown]]] = {
    "none": ({}, {}),
    "HTTPS_PROXY: the model's requests": (
        {"HTTPS_PROXY": A},
        {MODEL_VIA: ("http proxy", A, None)},
    ),
    "HTTP_PROXY without a scheme: the collector's": (
        {"HTTP_PROXY": "proxy-a.example:3128"},
        {SPANS_VIA: ("http proxy", A, None)},
    ),
    "ALL_PROXY with a password: both, and a credential": (
        {"ALL_PROXY": "http://u:secret@proxy-a.example:3128"},
        {MODEL_VIA: ("http proxy", A, "ALL_PROXY"), SPANS_VIA: ("http proxy", A, "ALL_PROXY")},
    ),
    "a SOCKS proxy": (
        {"all_proxy": "socks5://proxy-a.example:1080"},
        {
            MODEL_VIA: ("socks5 proxy", "socks5://proxy-a.example:1080", None),
            SPANS_VIA: ("socks5 proxy", "socks5://proxy-a.example:1080", None),
        },
    ),
    "the scheme's variable wins over ALL_PROXY": (
        {"ALL_PROXY": A, "HTTPS_PROXY": B},
        {MODEL_VIA: ("http proxy", B, None), SPANS_VIA: ("http proxy", A, None)},
    ),
    "lower case wins": (
        {"HTTPS_PROXY": A, "https_proxy": "http://u:p@proxy-b.example:3128"},
        {MODEL_VIA: ("http proxy", B, "https_proxy")},
    ),
    "lower case set empty unsets": ({"HTTPS_PROXY": A, "https_proxy": ""}, {}),
    "a CGI request's HTTP_PROXY is ignored": ({"REQUEST_METHOD": "GET", "HTTP_PROXY": A}, {}),
    "NO_PROXY names the hosts": (
        {"ALL_PROXY": A, "NO_PROXY": "api.anthropic.com, collector.example.net"},
        {},
    ),
    "no_proxy names the domains above them": (
        {"ALL_PROXY": A, "no_proxy": "anthropic.com,.example.net"},
        {},
    ),
    "NO_PROXY is *": ({"ALL_PROXY": A, "NO_PROXY": "*"}, {}),
    "NO_PROXY names the collector with its port": (
        {"ALL_PROXY": A, "NO_PROXY": "collector.example.net:4318"},
        {MODEL_VIA: ("http proxy", A, None)},
    ),
    "NO_PROXY names the collector on another port": (
        {"ALL_PROXY": A, "NO_PROXY": "collector.example.net:9999"},
        {MODEL_VIA: ("http proxy", A, None), SPANS_VIA: ("http proxy", A, None)},
    ),
    # requests exempts any host ending so; httpx only the domain and the hosts below it.
    "NO_PROXY a bare suffix: httpx still uses the proxy": (
        {"HTTPS_PROXY": A, "NO_PROXY": "thropic.com"},
        {MODEL_VIA: ("http proxy", A, None)},
    ),
    # requests reads no_proxy or NO_PROXY; urllib (and httpx) let an empty no_proxy unset it.
    "no_proxy set empty: httpx still uses the proxy": (
        {"ALL_PROXY": A, "NO_PROXY": "*", "no_proxy": ""},
        {MODEL_VIA: ("http proxy", A, None), SPANS_VIA: ("http proxy", A, None)},
    ),
    "a proxy for another scheme": ({"FTP_PROXY": A}, {}),
}


@pytest.mark.parametrize("case", sorted(PROXIES))
def test_each_proxy_the_harness_goes_through_is_listed(case: str) -> None:
    environ, expected = PROXIES[case]
    assert _proxies(environ) == expected


def test_no_password_of_a_proxy_or_an_endpoint_is_listed() -> None:
    spans = COLLECTOR.replace("http://", "http://op:secret@")
    found = _proxies({"ALL_PROXY": "http://u:secret@Proxy-A.example:3128"}, spans=spans)
    assert found[SPANS_VIA] == ("http proxy", A, "ALL_PROXY")
    unreadable = _proxies({"HTTPS_PROXY": "http://u:secret@[proxy"})
    assert unreadable[MODEL_VIA] == ("proxy", "(a URL that does not parse)", "HTTPS_PROXY")


# httpx opens no client for a SOCKS proxy without its extra (socksio), which airlock does not
# install: those cases are checked by the table above only.
CLIENT_CASES = sorted(
    case for case, (environ, _) in PROXIES.items()
    if not any(value.startswith("socks") for value in environ.values())
)  # fmt: skip


@pytest.mark.parametrize("case", CLIENT_CASES)
def test_a_proxy_is_listed_when_any_client_would_use_it(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ, _ = PROXIES[case]
    for name in [n for n in os.environ if n.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("REQUEST_METHOD", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    listed = {name: where for name, (_, where, _) in _proxies(environ).items()}
    for name, url in ((MODEL_VIA, MODEL), (SPANS_VIA, COLLECTOR)):
        used = {p for p in (_httpx_proxy(url), _requests_proxy(url)) if p is not None}
        assert len(used) <= 1, used  # when both use one, it is the same
        assert listed.get(name) == next(iter(used), None), (name, used)


def _httpx_proxy(url: str) -> str | None:
    with httpx.Client() as client:
        pool = client._transport_for_url(httpx.URL(url))._pool  # type: ignore[attr-defined]
    proxy = getattr(pool, "_proxy_url", None)
    if proxy is None:
        return None
    return f"{proxy.scheme.decode()}://{proxy.host.decode()}:{proxy.port}"


def _requests_proxy(url: str) -> str | None:
    chosen = requests.utils.select_proxy(url, requests.utils.get_environ_proxies(url))
    if chosen is None:
        return None
    parts = urlsplit(chosen if "://" in chosen else f"http://{chosen}")
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


# DOCKER_HOST, variables -> the engine's proxy (None: it connects directly)
ENGINES: dict[str, tuple[str, dict[str, str], str | None]] = {
    "a unix socket": ("unix:///var/run/docker.sock", {"ALL_PROXY": A}, None),
    "tcp": ("tcp://engine.example:2375", {"HTTP_PROXY": A}, A),
    "tcp, NO_PROXY names it": (
        "tcp://engine.example:2375",
        {"HTTP_PROXY": A, "NO_PROXY": "engine.example"},
        None,
    ),
    "tcp with TLS takes HTTPS_PROXY": (
        "tcp://engine.example:2376",
        {"HTTP_PROXY": A, "HTTPS_PROXY": B, "DOCKER_TLS_VERIFY": "1"},
        B,
    ),
    "tcp, TLS verify set empty is off": (
        "tcp://engine.example:2375",
        {"HTTP_PROXY": A, "HTTPS_PROXY": B, "DOCKER_TLS_VERIFY": ""},
        A,
    ),
}


@pytest.mark.parametrize("case", sorted(ENGINES))
def test_an_engine_over_tcp_goes_through_the_proxy_too(case: str) -> None:
    docker_host, environ, expected = ENGINES[case]
    engine = _proxies(environ, docker_host=docker_host).get("proxy for docker engine")
    assert (engine and engine[1]) == expected
