"""The audit hook behind the runtime checks (:mod:`airlock.tools._egress`): which of Python's
audit events it watches (:data:`CHECKED_EVENTS`) and what each one is about to reach.

The hook is installed once per process (:func:`install`, with the recording
``socket.getaddrinfo`` of :mod:`airlock.tools._resolved`, the event loop's lookups checked in
the caller's context, the event :mod:`airlock.tools._egress_network` adds for a listen and
those :mod:`airlock.tools._egress_process` adds for ``_posixsubprocess``, process pools and
signals) and runs on every audit event of every thread; when the running context
has no current call (:data:`CURRENT`) it returns after two dictionary look-ups. Inside a call,
each watched event asks the call's check whether the tool declares what the event is about to
reach (network events in :mod:`airlock.tools._egress_network`, file events here; process
events are all refused), and a refusal raises :class:`UndeclaredReachError` before the
operation happens. An event whose arguments it cannot read is refused too: the check fails
closed.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import logging
import os
import socket
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import FrameType, MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal

from airlock.policies import Effect
from airlock.tools._egress_network import (
    LISTEN,
    announce_listen,
    on_bind,
    on_connect,
    on_listen,
    on_lookup,
    on_reverse_lookup,
)
from airlock.tools._egress_process import PROCESS_EVENTS, announce, on_process
from airlock.tools._resolved import recording

if TYPE_CHECKING:
    from airlock.tools._egress import CallCheck

__all__ = [
    "CHECKED_EVENTS",
    "CURRENT",
    "FILE_PREFIX",
    "ReachKind",
    "UndeclaredReachError",
    "Violation",
    "check_credential",
    "install",
    "installed",
    "violated",
]

_log = logging.getLogger("airlock.tools")

ReachKind = Literal["network", "file", "process", "credential"]
"""What a violation reached: a destination, a file, a process (or the host's environment),
a credential."""
FILE_PREFIX: Final = "file:"
"""The resource prefix of a file in effects: ``write("file:/var/reports/*")``."""
_RUNTIME_FILES: Final = frozenset(
    {
        # The import system writes the bytecode cache of a module first imported by a tool.
        "<frozen importlib._bootstrap_external>",
        # The process's log files: a FileHandler opens lazily, a rotating one renames.
        os.path.join(os.path.dirname(logging.__file__), "__init__.py"),
        os.path.join(os.path.dirname(logging.__file__), "handlers.py"),
    }
)
_WRITE_FLAGS: Final = os.O_CREAT | os.O_TRUNC | os.O_APPEND

CURRENT: Final[contextvars.ContextVar[CallCheck | None]] = contextvars.ContextVar(
    "airlock_current_tool_call", default=None
)
"""The call whose tool's code runs in this context, if any."""
installed = False
"""Whether :func:`install` has run in this process."""
_install_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Violation:
    """One thing a tool's code reached that its declarations do not cover."""

    kind: ReachKind
    target: str
    """What it reached: ``203.0.113.9:443``, ``evil.example``, ``/etc/cron.d/x``,
    ``/usr/bin/curl``, ``STRIPE_KEY`` (a credential's name, never its value)."""
    action: str
    """The attempt in words, for messages: ``connect to '203.0.113.9:443'``."""
    event: str
    """The audit event that saw it (``socket.connect``, ``open``, ...; ``credential``)."""

    @property
    def rule(self) -> str:
        """The audit record's ``rule``: ``runtime:network``, ``runtime:file``, ..."""
        return f"runtime:{self.kind}"

    @property
    def effect(self) -> Effect | None:
        """The effect the attempt would have had, for the audit record: ``network(host:port)``
        or ``write(file:/path)``; ``None`` for a process or credential (no effect kind)."""
        try:
            if self.kind == "network":
                return Effect("network", self.target)
            if self.kind == "file":
                return Effect("write", FILE_PREFIX + self.target)
        except ValueError:  # characters the effect grammar has no room for: detail only
            return None
        return None


class UndeclaredReachError(PermissionError):
    """Raised inside a tool's code at an operation its declarations do not cover, before it
    happens. Catching it does not help the tool: the call fails with ``denied`` anyway."""

    def __init__(self, violation: Violation) -> None:
        super().__init__(
            errno.EACCES, f"airlock: the tool does not declare this: {violation.action}"
        )
        self.violation = violation


# -- the audit hook ----------------------------------------------------------------------------


def _hook(event: str, args: tuple[Any, ...]) -> None:
    # Runs on every audit event of the process, in every thread: two lookups when no call is
    # current, so the rest of the process pays next to nothing for it.
    handle = _HANDLERS.get(event)
    if handle is None:
        return
    check = CURRENT.get()
    if check is None:
        return
    _run(handle, check, event, args)


def _run(
    handle: Callable[[CallCheck, str, tuple[Any, ...]], None],
    check: CallCheck,
    event: str,
    args: tuple[Any, ...],
) -> None:
    try:
        handle(check, event, args)
    except UndeclaredReachError:
        raise
    except Exception as exc:  # a check that cannot read its event refuses (fails closed)
        _log.warning("runtime check could not read %s", event, exc_info=exc)
        kind = _KIND.get(event, "network")
        check.refuse(kind, f"{event} {args!r}"[:200], event, f"{event} (unreadable arguments)")


def _checked_getaddrinfo(
    original: Callable[..., Awaitable[Any]],
) -> Callable[..., Awaitable[Any]]:
    """The event loop's ``getaddrinfo``, checked in the caller's context. The loop resolves
    on an executor thread, where no call is current, so the hook there lets every name
    through: the query, and what a name can encode, would leave before any connect is
    checked."""

    async def getaddrinfo(
        self: asyncio.AbstractEventLoop,
        host: Any,
        port: Any,
        *,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> Any:
        check = CURRENT.get()
        if check is not None:
            _run(on_lookup, check, "socket.getaddrinfo", (host, port, family, type, proto))
        return await original(self, host, port, family=family, type=type, proto=proto, flags=flags)

    getaddrinfo.__wrapped__ = original  # type: ignore[attr-defined]
    return getaddrinfo


def _checked_getnameinfo(
    original: Callable[..., Awaitable[Any]],
) -> Callable[..., Awaitable[Any]]:
    """The event loop's ``getnameinfo``, checked in the caller's context (as
    :func:`_checked_getaddrinfo`: the loop asks the resolver on an executor thread)."""

    async def getnameinfo(self: asyncio.AbstractEventLoop, sockaddr: Any, flags: int = 0) -> Any:
        check = CURRENT.get()
        if check is not None:
            _run(on_reverse_lookup, check, "socket.getnameinfo", (sockaddr,))
        return await original(self, sockaddr, flags)

    getnameinfo.__wrapped__ = original  # type: ignore[attr-defined]
    return getnameinfo


def _on_open(check: CallCheck, event: str, args: tuple[Any, ...]) -> None:
    path, mode, flags = (*args, None, None, None)[:3]
    if isinstance(path, int):  # a descriptor opened earlier (and checked then, if by the tool)
        return
    if isinstance(flags, int):
        writes = (flags & os.O_ACCMODE) != os.O_RDONLY or bool(flags & _WRITE_FLAGS)
    else:
        writes = isinstance(mode, str) and any(c in mode for c in "wax+")
    if writes:
        _check_path(check, event, path, None)


_PATH_ARGS: Final[Mapping[str, tuple[tuple[int, int | None], ...]]] = {
    # event -> (index of a path it changes, index of that path's dir_fd or None), ...
    "os.chmod": ((0, 2),),
    "os.chown": ((0, 3),),
    "os.chflags": ((0, None),),
    "os.lchflags": ((0, None),),
    "os.link": ((1, 3),),
    "os.mkdir": ((0, 2),),
    "os.remove": ((0, 1),),
    "os.removexattr": ((0, None),),
    "os.rename": ((0, 2), (1, 3)),
    "os.rmdir": ((0, 1),),
    "os.setxattr": ((0, None),),
    "os.symlink": ((1, 2),),
    "os.truncate": ((0, None),),
    "os.utime": ((0, 3),),
    "shutil.rmtree": ((0, 1),),
}


def _on_file_change(check: CallCheck, event: str, args: tuple[Any, ...]) -> None:
    for index, dir_fd_index in _PATH_ARGS[event]:
        path = args[index] if index < len(args) else None
        if path is None or isinstance(path, int):  # a descriptor: opened (and checked) earlier
            continue
        dir_fd = (
            args[dir_fd_index] if dir_fd_index is not None and dir_fd_index < len(args) else None
        )
        _check_path(check, event, path, dir_fd)


def _check_path(check: CallCheck, event: str, path: object, dir_fd: object) -> None:
    text = _path_text(path, dir_fd)
    if text == os.devnull or _by_the_runtime():
        return
    if text is not None and check.allows_file(text):
        return
    shown = text if text is not None else f"{path!r} (relative to a directory descriptor)"
    check.refuse("file", shown, event, f"write {shown!r}")


_NETWORK: Final = (on_connect, on_lookup, on_reverse_lookup, on_bind, on_listen)
_HANDLERS: Final[Mapping[str, Callable[[CallCheck, str, tuple[Any, ...]], None]]] = {
    "socket.connect": on_connect,
    "socket.sendto": on_connect,
    "socket.sendmsg": on_connect,
    "socket.getaddrinfo": on_lookup,
    "socket.gethostbyname": on_lookup,  # gethostbyname_ex raises it too
    "socket.gethostbyname_ex": on_lookup,
    "socket.gethostbyaddr": on_reverse_lookup,
    "socket.getnameinfo": on_reverse_lookup,
    "socket.bind": on_bind,
    LISTEN: on_listen,
    "open": _on_open,
    **dict.fromkeys(_PATH_ARGS, _on_file_change),
    **dict.fromkeys(PROCESS_EVENTS, on_process),
}
_KIND: Final[Mapping[str, ReachKind]] = {
    event: (
        "network"
        if handle in _NETWORK
        else "file"
        if handle in (_on_open, _on_file_change)
        else "process"
    )
    for event, handle in _HANDLERS.items()
}
CHECKED_EVENTS: Final[Mapping[str, ReachKind]] = MappingProxyType(dict(_KIND))
"""Every audit event the runtime check watches, and the kind of reach it stands for."""


def install() -> None:
    """Install the audit hook, the recording ``socket.getaddrinfo``, the event loop's checked
    ``getaddrinfo`` and ``getnameinfo``, and the functions that raise an audit event Python
    does not (``socket.socket.listen``, ``_posixsubprocess.fork_exec``, a process pool's
    ``submit``, ``signal.pidfd_send_signal``...), once per process (an audit hook cannot be
    removed)."""
    global installed
    with _install_lock:
        if installed:
            return
        # Python finds its temporary directory by writing a probe file there, once per
        # process: the process's, not the first tool's that asks (no call is current yet).
        tempfile.gettempdir()
        socket.getaddrinfo = recording(socket.getaddrinfo)
        loop = asyncio.base_events.BaseEventLoop  # every asyncio loop (uvloop's is not one)
        setattr(loop, "getaddrinfo", _checked_getaddrinfo(loop.getaddrinfo))  # noqa: B010
        setattr(loop, "getnameinfo", _checked_getnameinfo(loop.getnameinfo))  # noqa: B010
        announce_listen()
        announce()
        sys.addaudithook(_hook)
        installed = True


def _path_text(path: object, dir_fd: object) -> str | None:
    """The absolute path (symbolic links resolved) an event names, or ``None`` when it is
    relative to a directory descriptor and so cannot be placed."""
    if not isinstance(path, str | bytes | os.PathLike):
        return None
    raw = os.fsdecode(os.fspath(path))
    if not os.path.isabs(raw) and isinstance(dir_fd, int):
        return None
    return os.path.realpath(raw)


def _by_the_runtime() -> bool:
    """Whether the Python code that made this file event is the interpreter's own (the
    bytecode cache) or the ``logging`` module's, not the tool's."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == _HERE:
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename in _RUNTIME_FILES


_HERE: Final = _by_the_runtime.__code__.co_filename


def violated() -> bool:
    """Whether the current call has reached something it does not declare (an adapter stops
    retrying then: another attempt would be refused the same way)."""
    check = CURRENT.get()
    return check is not None and bool(check.violations)


def check_credential(name: str) -> None:
    """Refuse revealing the credential ``name`` inside a call whose tool does not declare it.

    Raises:
        UndeclaredReachError: a tool call is current and its tool does not declare ``name``
            (for its principal's tenant, when it declares ``tenant_credentials``).
    """
    check = CURRENT.get()
    if check is not None and not check.allows_credential(name):
        check.refuse("credential", name, "credential", f"use the credential {name!r}")
