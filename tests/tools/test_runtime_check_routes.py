"""Every route the standard library offers to a new process, a listening socket or a lookup of
an address's name is refused inside a call, and left alone outside one (the harness's own).

``test_runtime_checks.py`` runs one route of each through whole calls (direct and from code,
sync and async handlers); this table runs the others against a current call directly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import multiprocessing
import multiprocessing.util
import os
import pty
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airlock.tools._destination import parse_destination
from airlock.tools._egress import CallCheck, DeclaredReach, enter, leave
from airlock.tools._egress_hook import install


def _child(pid: int) -> int:
    if pid == 0:  # only if a fork got through: the child must not go on running the tests
        os._exit(0)
    return pid


def _private_fork_exec() -> Any:
    read_end, write_end = os.pipe()
    try:
        return subprocess._fork_exec(  # type: ignore[attr-defined]
            [b"/bin/true"], [b"/bin/true"], True, (), None, None,
            -1, -1, -1, -1, -1, -1, read_end, write_end,
            False, False, -1, None, None, None, -1, None, False,
        )  # fmt: skip
    finally:
        os.close(read_end)
        os.close(write_end)


def _process(start_method: str) -> Any:
    return multiprocessing.get_context(start_method).Process(target=print).start()


def _pool() -> Any:
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        return pool.submit(print).result(timeout=20)


def _bound(family: socket.AddressFamily, kind: socket.SocketKind, address: Any) -> None:
    with socket.socket(family, kind) as sock:
        sock.bind(address)


async def _start_server() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    server.close()


async def _name_through_the_loop(address: str) -> Any:
    return await asyncio.get_running_loop().getnameinfo((address, 443))


# route -> (what it does inside a call, the audit event that refuses it)
ROUTES: dict[str, tuple[Callable[[Path], Any], str]] = {
    "os.fork": (lambda d: _child(os.fork()), "os.fork"),
    "os.forkpty": (lambda d: _child(os.forkpty()[0]), "os.forkpty"),
    "pty.fork": (lambda d: _child(pty.fork()[0]), "os.forkpty"),
    "os.posix_spawn": (lambda d: os.posix_spawn("/bin/true", ["true"], {}), "os.posix_spawn"),
    "os.posix_spawnp": (lambda d: os.posix_spawnp("true", ["true"], {}), "os.posix_spawn"),
    "os.spawnv": (lambda d: os.spawnv(os.P_WAIT, "/bin/true", ["true"]), "os.fork"),
    "os.system": (lambda d: os.system("true"), "os.system"),
    "os.popen": (lambda d: os.popen("true").read(), "subprocess.Popen"),
    "subprocess.run": (lambda d: subprocess.run(["true"], check=False), "subprocess.Popen"),
    "subprocess's own fork_exec": (lambda d: _private_fork_exec(), "_posixsubprocess.fork_exec"),
    "multiprocessing.util.spawnv_passfds": (
        lambda d: multiprocessing.util.spawnv_passfds(b"/bin/true", [b"true"], []),
        "_posixsubprocess.fork_exec",
    ),
    "multiprocessing fork": (lambda d: _process("fork"), "os.fork"),
    "multiprocessing forkserver": (lambda d: _process("forkserver"), "_posixsubprocess.fork_exec"),
    "ProcessPoolExecutor": (lambda d: _pool(), "_posixsubprocess.fork_exec"),
    "asyncio subprocess": (
        lambda d: asyncio.run(asyncio.create_subprocess_exec("true")),
        "subprocess.Popen",
    ),
    "socket.create_server": (lambda d: socket.create_server(("127.0.0.1", 0)), "socket.bind"),
    "asyncio.start_server": (lambda d: asyncio.run(_start_server()), "socket.bind"),
    "UDP bind to every interface": (
        lambda d: _bound(socket.AF_INET, socket.SOCK_DGRAM, ("", 0)),
        "socket.bind",
    ),
    "IPv6 bind": (lambda d: _bound(socket.AF_INET6, socket.SOCK_STREAM, ("::1", 0)), "socket.bind"),
    "Unix socket bind": (
        lambda d: _bound(socket.AF_UNIX, socket.SOCK_STREAM, str(d / "listen.sock")),
        "socket.bind",
    ),
    "abstract Unix socket bind": (
        lambda d: _bound(socket.AF_UNIX, socket.SOCK_STREAM, b"\0airlock-test"),
        "socket.bind",
    ),
    "gethostbyaddr of a name": (
        lambda d: socket.gethostbyaddr("exfil.example.invalid"),
        "socket.gethostbyaddr",
    ),
    "gethostbyaddr of an IPv6 address": (
        lambda d: socket.gethostbyaddr("2001:db8:6c65:616b::1"),
        "socket.gethostbyaddr",
    ),
    "getnameinfo": (lambda d: socket.getnameinfo(("203.0.113.9", 443), 0), "socket.getnameinfo"),
    "the event loop's getnameinfo": (
        lambda d: asyncio.run(_name_through_the_loop("203.0.113.9")),
        "socket.getnameinfo",
    ),
    "gethostbyname_ex": (
        lambda d: socket.gethostbyname_ex("exfil.example.invalid"),
        "socket.gethostbyname",
    ),
    # getfqdn swallows the refusal and answers with the name it was given: the call is denied
    # all the same (the violation is recorded).
    "getfqdn": (lambda d: socket.getfqdn("exfil.example.invalid"), "socket.gethostbyaddr"),
}


def _current_call() -> CallCheck:
    """A call of a tool that declares ``https://api.example.com`` only."""
    reach = DeclaredReach(
        tool="t",
        destinations=(parse_destination("https://api.example.com"),),
        network=(),
        credentials=frozenset(),
        tenant_credentials={},
    )
    return reach.check(phase="handler", tenant="acme")


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_every_route_is_refused_inside_a_call(tmp_path: Path, route: str) -> None:
    attempt, event = ROUTES[route]
    # multiprocessing makes a temporary directory (for forkserver's socket) on first use: the
    # first use inside a call is refused as a file write, before the process start is tried.
    multiprocessing.util.get_temp_dir()
    check = _current_call()
    token = enter(check)  # in the test's body only: pytest's own code is not the tool's
    try:
        # The refusal is a PermissionError: asyncio wraps it in an OSError of its own, getfqdn
        # swallows it; what counts is that it was recorded, first, on the call.
        with contextlib.suppress(OSError):
            attempt(tmp_path)
    finally:
        leave(token, check)
    assert [v.event for v in check.violations][:1] == [event]
    assert not (tmp_path / "listen.sock").exists()


def test_the_harness_starts_processes_outside_any_call() -> None:
    install()
    import _posixsubprocess

    assert hasattr(_posixsubprocess.fork_exec, "__wrapped__")  # the announcing one is in place
    pid = multiprocessing.util.spawnv_passfds(b"/bin/true", [b"true"], [])
    assert os.waitpid(pid, 0)[1] == 0
    assert subprocess.run(["true"], check=False).returncode == 0
    with socket.create_server(("127.0.0.1", 0)) as server:
        assert server.getsockname()[1] > 0
