"""Every route the standard library offers to a new process (or to one started before the call:
a process pool's workers), a signal, a listening socket or a lookup of an address's name is
refused inside a call, and left alone outside one (the harness's own).

``test_runtime_checks.py`` runs one route of each through whole calls (direct and from code,
sync and async handlers); this table runs the others against a current call directly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import multiprocessing
import multiprocessing.pool
import multiprocessing.resource_tracker
import multiprocessing.util
import os
import pty
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airlock.tools._destination import parse_destination
from airlock.tools._egress import CallCheck, DeclaredReach, enter, leave
from airlock.tools._egress_hook import install
from airlock.tools._egress_process import POOL_METHODS

from .reach_world import touch


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


def _listened(family: socket.AddressFamily) -> None:
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.listen()  # never bound: the kernel picks a port, on every interface


async def _served_on_an_unbound_socket(*, through_the_loop: bool) -> int:
    sock = socket.socket()
    try:
        if through_the_loop:
            loop = asyncio.get_running_loop()
            server = await loop.create_server(asyncio.Protocol, sock=sock)
        else:
            server = await asyncio.start_server(lambda r, w: None, sock=sock)
    except BaseException:
        sock.close()
        raise
    port = int(server.sockets[0].getsockname()[1])
    server.close()
    await server.wait_closed()
    return port


def _signalled_by_descriptor(pid: int, signum: int) -> None:
    pidfd = os.pidfd_open(pid)
    try:
        signal.pidfd_send_signal(pidfd, signum)
    finally:
        os.close(pidfd)


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
    # Starting the forkserver binds its socket in this process first (the resource tracker,
    # whose start would come before, runs already: see the test).
    "multiprocessing forkserver": (lambda d: _process("forkserver"), "socket.bind"),
    # Refused before it starts its worker: it would hand the work over even if one ran.
    "ProcessPoolExecutor": (lambda d: _pool(), "airlock.process_pool"),
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
    "listen without bind": (lambda d: _listened(socket.AF_INET), "socket.listen"),
    "IPv6 listen without bind": (lambda d: _listened(socket.AF_INET6), "socket.listen"),
    "asyncio.start_server on an unbound socket": (
        lambda d: asyncio.run(_served_on_an_unbound_socket(through_the_loop=False)),
        "socket.listen",
    ),
    "loop.create_server on an unbound socket": (
        lambda d: asyncio.run(_served_on_an_unbound_socket(through_the_loop=True)),
        "socket.listen",
    ),
    # Signal 0 only asks whether the process or thread exists: harmless if it got through.
    "signal.pidfd_send_signal": (
        lambda d: _signalled_by_descriptor(os.getpid(), 0),
        "signal.pidfd_send_signal",
    ),
    "signal.pthread_kill": (
        lambda d: signal.pthread_kill(threading.main_thread().ident or 0, 0),
        "signal.pthread_kill",
    ),
    # SIGWINCH is ignored unless handled: harmless if it got through.
    "signal.raise_signal": (lambda d: signal.raise_signal(signal.SIGWINCH), "signal.raise_signal"),
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
    # Its first lock starts the resource tracker, a process: the process's, not the tool's.
    multiprocessing.resource_tracker.ensure_running()
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


# -- processes started before the call -------------------------------------------------------


@dataclass(frozen=True)
class Pools:
    """Process pools whose workers were started outside every call, as a tool module's
    import would start them."""

    executor: concurrent.futures.ProcessPoolExecutor
    pool: multiprocessing.pool.Pool


@pytest.fixture(scope="module")
def pools() -> Iterator[Pools]:
    spawn = multiprocessing.get_context("spawn")
    executor = concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn)
    pool = spawn.Pool(1)
    try:
        assert executor.submit(abs, -1).result(timeout=30) == 1  # its worker runs from here
        assert pool.apply(abs, (-1,)) == 1
        yield Pools(executor, pool)
    finally:
        executor.shutdown(cancel_futures=True)
        pool.terminate()
        pool.join()


async def _through_the_loop(executor: concurrent.futures.Executor, path: str) -> None:
    await asyncio.get_running_loop().run_in_executor(executor, touch, path)


# route -> what it hands the workers inside a call (touch the file at the path)
POOL_ROUTES: dict[str, Callable[[Pools, str], Any]] = {
    "ProcessPoolExecutor.submit": lambda p, f: p.executor.submit(touch, f).result(timeout=30),
    "ProcessPoolExecutor.map": lambda p, f: list(p.executor.map(touch, [f], timeout=30)),
    "loop.run_in_executor": lambda p, f: asyncio.run(_through_the_loop(p.executor, f)),
    "Pool.apply": lambda p, f: p.pool.apply(touch, (f,)),
    "Pool.apply_async": lambda p, f: p.pool.apply_async(touch, (f,)).get(timeout=30),
    "Pool.map": lambda p, f: p.pool.map(touch, [f]),
    "Pool.map_async": lambda p, f: p.pool.map_async(touch, [f]).get(timeout=30),
    "Pool.starmap": lambda p, f: p.pool.starmap(touch, [(f,)]),
    "Pool.starmap_async": lambda p, f: p.pool.starmap_async(touch, [(f,)]).get(timeout=30),
    "Pool.imap": lambda p, f: list(p.pool.imap(touch, [f])),
    "Pool.imap_unordered": lambda p, f: list(p.pool.imap_unordered(touch, [f])),
}


@pytest.mark.parametrize("route", sorted(POOL_ROUTES))
def test_a_pool_started_before_the_call_takes_no_work_from_it(
    pools: Pools, tmp_path: Path, route: str
) -> None:
    # Its workers run outside every call: what they would do for the call is never checked.
    handed = tmp_path / "done-by-a-worker"
    check = _current_call()
    token = enter(check)
    try:
        with contextlib.suppress(OSError):
            POOL_ROUTES[route](pools, str(handed))
    finally:
        leave(token, check)
    assert [v.event for v in check.violations][:1] == ["airlock.process_pool"]
    assert "touch" in check.violations[0].action
    assert not handed.exists()


# A fresh interpreter: a forkserver, once started, serves the whole process.
FORKSERVER_STARTED_BEFORE = """
import multiprocessing, os
from airlock.tools._destination import parse_destination
from airlock.tools._egress import DeclaredReach, enter, leave

context = multiprocessing.get_context("forkserver")
before = context.Process(target=os.getpid)  # starts the forkserver, outside every call
before.start()
before.join(20)
check = DeclaredReach(
    tool="t", destinations=(parse_destination("https://api.example.com"),), network=(),
    credentials=frozenset(), tenant_credentials={},
).check(phase="handler", tenant="acme")
token = enter(check)
try:
    context.Process(target=os.getpid).start()
except PermissionError:
    pass
finally:
    leave(token, check)
print(before.exitcode, [(v.event, v.target.startswith("unix://")) for v in check.violations])
"""


def test_a_forkserver_started_before_the_call_starts_nothing_for_it() -> None:
    # Its children are forked by the forkserver, with no event here: the request is refused,
    # as a connection to a Unix socket the tool does not declare.
    done = subprocess.run(
        [sys.executable, "-c", FORKSERVER_STARTED_BEFORE],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "0 [('socket.connect', True)]"


def test_a_thread_pool_is_not_a_process_pool() -> None:
    install()
    check = _current_call()
    token = enter(check)
    try:
        with multiprocessing.pool.ThreadPool(1) as threads:
            assert threads.map(abs, [-1, -2]) == [1, 2]
    finally:
        leave(token, check)
    assert check.violations == []


# -- the harness's own, outside every call ---------------------------------------------------


def _signal_received(send: Callable[[], Any]) -> bool:
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(signum))
    try:
        send()
        for _ in range(100):  # delivered between bytecodes, in the main thread
            if received:
                break
            time.sleep(0.01)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    return received == [signal.SIGUSR1]


def _unbound_listener_port() -> int:
    with socket.socket() as sock:
        sock.listen()
        return int(sock.getsockname()[1])


def _terminated_by_descriptor() -> int | None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        _signalled_by_descriptor(child.pid, signal.SIGTERM)
        return child.wait(timeout=10)
    finally:
        child.kill()
        child.wait()


# what the harness does outside every call -> whether it did it
OUTSIDE: dict[str, Callable[[Pools], bool]] = {
    "listen without bind": lambda p: _unbound_listener_port() > 0,
    "asyncio.start_server on an unbound socket": lambda p: (
        asyncio.run(_served_on_an_unbound_socket(through_the_loop=False)) > 0
    ),
    "signal.raise_signal": lambda p: _signal_received(lambda: signal.raise_signal(signal.SIGUSR1)),
    "signal.pthread_kill": lambda p: _signal_received(
        lambda: signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)
    ),
    "signal.pidfd_send_signal": lambda p: _terminated_by_descriptor() == -signal.SIGTERM,
    "ProcessPoolExecutor.map": lambda p: list(p.executor.map(abs, [-1], chunksize=1)) == [1],
    "Pool.starmap": lambda p: p.pool.starmap(pow, [(2, 3)], chunksize=1) == [8],
    "Pool.imap_unordered": lambda p: list(p.pool.imap_unordered(abs, [-1], chunksize=1)) == [1],
}


@pytest.mark.parametrize("route", sorted(OUTSIDE))
def test_the_harness_listens_signals_and_uses_its_pools_outside_any_call(
    pools: Pools, route: str
) -> None:
    install()
    assert OUTSIDE[route](pools)


REPLACED = (
    "socket.socket.listen",
    "signal.raise_signal",
    "_signal.raise_signal",
    "signal.pidfd_send_signal",
    "_signal.pidfd_send_signal",
    "ProcessPoolExecutor.submit",
    "ProcessPoolExecutor.map",
    *(f"Pool.{name}" for name in POOL_METHODS),
)
"""Each function the hook replaces so that it raises an audit event first."""


def _replaced(name: str) -> Any:
    owner, _, attribute = name.rpartition(".")
    return getattr(
        {
            "socket.socket": socket.socket,
            "signal": signal,
            "_signal": sys.modules["_signal"],
            "ProcessPoolExecutor": concurrent.futures.ProcessPoolExecutor,
            "Pool": multiprocessing.pool.Pool,
        }[owner],
        attribute,
    )


def _signature(fn: Any) -> str:
    try:
        return str(inspect.signature(fn))
    except ValueError:  # a C function without one: its wrapper has none either
        return "(none)"


@pytest.mark.parametrize("name", REPLACED)
def test_a_replaced_function_keeps_its_name_and_signature(name: str) -> None:
    install()
    now = _replaced(name)
    original = now.__wrapped__
    assert (now.__name__, now.__doc__, _signature(now)) == (
        original.__name__,
        original.__doc__,
        _signature(original),
    )
