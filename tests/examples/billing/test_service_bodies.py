"""Request bodies the billing service refuses before it acts: too large (by ``Content-Length``
or as read) and nested too deep to parse, each a 4xx and never a 500."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from examples.billing.server import BillingServer, serve_billing
from examples.billing.service import MAX_BODY_BYTES


@pytest.fixture(scope="module")
def billing() -> Iterator[BillingServer]:
    with serve_billing(invoices_per_tenant=3) as running:
        yield running


def _chunks(data: bytes, size: int = 16_384) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


# (case, body, sent in chunks without Content-Length, status, error type)
BODIES = [
    ("nested 5000 deep", b"[" * 5000 + b"]" * 5000, False, 400, "invalid_json"),
    ("nested 5000 deep, unclosed", b"[" * 5000, False, 400, "invalid_json"),
    ("object nested deep", b'{"a":' * 3000 + b"1" + b"}" * 3000, False, 400, "invalid_json"),
    ("over the cap by Content-Length", b" " * (MAX_BODY_BYTES + 1), False, 413, "body_too_large"),
    ("over the cap as read", b" " * (MAX_BODY_BYTES + 1), True, 413, "body_too_large"),
    ("far over the cap as read", b" " * (4 * MAX_BODY_BYTES), True, 413, "body_too_large"),
    ("at the cap", b" " * (MAX_BODY_BYTES - 2) + b"{}", False, 422, "invalid_request"),
    ("at the cap as read", b" " * (MAX_BODY_BYTES - 2) + b"{}", True, 422, "invalid_request"),
]


@pytest.mark.parametrize(
    ("case", "body", "chunked", "status", "kind"), BODIES, ids=[b[0] for b in BODIES]
)
@pytest.mark.parametrize("keyed", [False, True])
def test_a_refund_body_is_refused_before_anything_is_done(
    billing: BillingServer,
    case: str,
    body: bytes,
    chunked: bool,
    status: int,
    kind: str,
    keyed: bool,
) -> None:
    headers = {"Authorization": f"Bearer {billing.tokens['acme']}"}
    if keyed:
        headers["Idempotency-Key"] = f"k-{case}"
    before = (billing.store.count("refunds"), billing.store.count("idempotency_keys"))
    with httpx.Client(base_url=billing.base_url, timeout=10) as client:
        answer = client.post(
            "/v1/refunds", headers=headers, content=_chunks(body) if chunked else body
        )
    assert (answer.status_code, answer.json()["error"]["type"]) == (status, kind)
    after = (billing.store.count("refunds"), billing.store.count("idempotency_keys"))
    assert after == before


def test_a_declared_huge_body_is_refused_before_it_is_sent(billing: BillingServer) -> None:
    # A raw socket: an HTTP client will not promise 50 MB and send two bytes.
    host, port = billing.base_url.removeprefix("http://").split(":")
    head = (
        f"POST /v1/refunds HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {billing.tokens['acme']}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {50 << 20}\r\n\r\n{{}}"
    )
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(head.encode())
        answer = b""  # the service answers without waiting for the rest, and closes
        while b"}}" not in answer and (piece := sock.recv(65_536)):
            answer += piece
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:100]
    assert b"body_too_large" in answer


def test_an_admin_body_over_the_cap_is_refused(billing: BillingServer) -> None:
    headers = {"Authorization": f"Bearer {billing.admin_token}"}
    with httpx.Client(base_url=billing.base_url, timeout=10) as client:
        answer = client.post("/_admin/faults", headers=headers, content=b" " * (MAX_BODY_BYTES + 1))
    assert answer.status_code == 413
