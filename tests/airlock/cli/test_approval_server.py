"""The approval page's server against slow clients: a connection whose request does not
arrive in time is closed, so a local process cannot hold the page's connections open."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import anyio
import httpx
import pytest

from airlock.cli._approval_page import COOKIE, LOOPBACK, ApprovalPage
from airlock.cli._approval_server import page_server
from airlock.cli._approver import Approver
from airlock.tools import Preview
from tests.ports import free_port
from tests.tools.test_write_world import ASK, World

TOKEN = "t0ken-" + "s" * 20
DEADLINE = 1.0
"""The server's deadlines in these tests (10 s when served)."""
PATIENCE = 30.0
"""How long a test waits for the server to close: generous, the deadline is what it tests."""


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.close()


@contextmanager
def serving(
    page: ApprovalPage, *, head_timeout: float = DEADLINE, max_connections: int = 64
) -> Iterator[int]:
    """``page`` served in a thread, with short deadlines; its port."""
    port = free_port()
    server = page_server(
        page.app(),
        host=LOOPBACK,
        port=port,
        head_timeout=head_timeout,
        max_connections=max_connections,
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the approval page did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(20)


def _answer_until_closed(sock: socket.socket) -> bytes:
    """What the server sent before it closed ``sock``; fails when it holds it open."""
    sock.settimeout(PATIENCE)
    answer = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return answer
        except TimeoutError:
            pytest.fail(f"the server held the connection open for {PATIENCE} s: {answer!r}")
        if not chunk:
            return answer
        answer += chunk


def _post(base: str, session: str, length: int, sent: bytes) -> bytes:
    return (
        f"POST {base}approve HTTP/1.1\r\nHost: {LOOPBACK}\r\nOrigin: http://{LOOPBACK}\r\n"
        f"Cookie: {COOKIE}={session}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode() + sent


SLOW: list[tuple[str, str, tuple[bytes, ...]]] = [
    ("nothing at all", "", ()),
    ("part of the request line", "", (b"GET / HTT",)),
    ("the request line alone", "", (b"GET / HTTP/1.1\r\n",)),
    ("part of the headers", "", (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: te",)),
    ("a next request that stops", "HTTP/1.1 404", (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", b"GET /")),
    ("a form whose body stops", "HTTP/1.1 408", (b"POST",)),
]  # fmt: skip


@pytest.mark.parametrize(("case", "answered", "parts"), SLOW)
def test_a_request_that_does_not_arrive_in_time_is_closed(
    world: World, case: str, answered: str, parts: tuple[bytes, ...]
) -> None:
    waiting: Preview = anyio.run(lambda: world.prepare("inv_3", approvals=ASK))
    approver = Approver("carol", world.ledger)
    page = ApprovalPage(approver, ledger="ledger.db", token=TOKEN, body_timeout=DEADLINE)
    with serving(page) as port:
        opened = httpx.get(page.link(port), follow_redirects=False)
        assert opened.status_code == 303
        if parts == (b"POST",):  # a person's session posting a form of 100 bytes, sending 2
            parts = (_post(page.base, opened.cookies[COOKIE], 100, b"cs"),)
        answer = b""
        with socket.create_connection((LOOPBACK, port)) as sock:
            for n, part in enumerate(parts):
                sock.sendall(part)
                if n < len(parts) - 1:  # the next part after the server answered this one
                    sock.settimeout(PATIENCE)
                    answer += sock.recv(4096)
            answer += _answer_until_closed(sock)
        assert answer.decode("latin-1").startswith(answered), (case, answer)
        # and the page still answers others
        assert httpx.get(page.link(port), follow_redirects=False).status_code == 303
    assert world.ledger.approval(waiting.id) is None


def _login(sock: socket.socket, page: ApprovalPage) -> str:
    """The session a person's link opens, over ``sock`` (which stays open)."""
    sock.sendall(f"GET {page.base}?token={TOKEN} HTTP/1.1\r\nHost: {LOOPBACK}\r\n\r\n".encode())
    sock.settimeout(PATIENCE)
    opened = sock.recv(4096).decode("latin-1")
    found = re.search(f"{COOKIE}=([^;]+);", opened)
    assert opened.startswith("HTTP/1.1 303"), opened
    assert found is not None, opened
    return found.group(1)


# (case, what the one connection the cap allows is doing, whether a new one is served)
AT_THE_CAP = [
    ("it is idle after an answer: it gives way", "idle", True),
    ("it is sending a form: the new one is closed", "answering", False),
]


@pytest.mark.parametrize(("case", "first_is", "served"), AT_THE_CAP, ids=[c[0] for c in AT_THE_CAP])
def test_at_the_cap_an_idle_connection_gives_way_and_a_busy_one_does_not(
    world: World, case: str, first_is: str, served: bool
) -> None:
    # Idle keep-alive connections (one cheap request every few seconds each) would otherwise
    # hold every place, and the person's link would be refused for as long as they liked.
    approver = Approver("carol", world.ledger)
    page = ApprovalPage(approver, ledger="ledger.db", token=TOKEN, body_timeout=PATIENCE * 2)
    with (
        serving(page, head_timeout=PATIENCE * 2, max_connections=1) as port,
        socket.create_connection((LOOPBACK, port)) as first,
    ):
        session = _login(first, page)
        if first_is == "answering":  # its form's body is on its way: 2 bytes of 100 so far
            first.sendall(_post(page.base, session, 100, b"cs"))
        with socket.create_connection((LOOPBACK, port)) as second:
            try:
                second.sendall(f"GET {page.base} HTTP/1.1\r\nHost: {LOOPBACK}\r\n".encode())
                second.sendall(f"Cookie: {COOKIE}={session}\r\n\r\n".encode())
            except (BrokenPipeError, ConnectionResetError):
                # Closed before all of its head was written: the new one past the cap is
                # closed at once, which is what is asked when the first one is busy.
                assert not served, case
            second.settimeout(PATIENCE)
            answer = second.recv(4096) if served else _answer_until_closed(second)
        assert answer.startswith(b"HTTP/1.1 200") if served else answer == b""
        if served:  # and the idle one was closed to make room
            assert _answer_until_closed(first) == b""


def test_a_client_that_never_reads_its_answers_does_not_hold_the_page(world: World) -> None:
    # Many pipelined requests, never read: their answers wait for a reader that never comes,
    # so a request stays "being answered" and the head's deadline alone never closes it.
    page = ApprovalPage(Approver("carol", world.ledger), ledger="ledger.db", token=TOKEN)
    with (
        serving(page, max_connections=1) as port,
        socket.create_connection((LOOPBACK, port)) as sock,
    ):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        unread = b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 50_000
        threading.Thread(target=_send_until_closed, args=(sock, unread), daemon=True).start()
        deadline = time.monotonic() + PATIENCE
        while _link_status(page, port) != 303:
            assert time.monotonic() < deadline, "a client without the token holds the page"
            time.sleep(0.2)


def _send_until_closed(sock: socket.socket, data: bytes) -> None:
    with suppress(OSError):  # the server closed it: what the test waits for
        sock.sendall(data)


def _link_status(page: ApprovalPage, port: int) -> int | str:
    try:
        return httpx.get(page.link(port), follow_redirects=False, timeout=3).status_code
    except httpx.TransportError as exc:
        return type(exc).__name__
