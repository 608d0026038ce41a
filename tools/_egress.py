"""Runtime checks of declarations: while a tool's code runs, what it reaches is checked.

The effect inventory is only as true as what tools declare: their destinations (``destinations=``,
an adapter's, and their ``network`` effects), the files they write (``write("file:...")``
effects) and the credentials they send. So while a tool's code runs (a read's handler; a write
tool's ``prepare``, ``commit`` and ``lookup``), its :class:`CallCheck` is the *current call*
of the running context (a :class:`contextvars.ContextVar`, which anyio copies into the worker
thread of a sync handler and asyncio into every task the code starts), and one audit hook
(:func:`sys.addaudithook`, installed once per process, when the first call is checked)
compares what the code does with what the tool declared:

=================================  ===============================================================
Python's audit event               allowed while a call is current
=================================  ===============================================================
``socket.connect``,                the address and port match a declared destination: the same
``socket.sendto``,                 address, or a name this process resolved to that address; a
``socket.sendmsg``                 Unix socket only when declared (``unix:///run/app.sock``)
``socket.getaddrinfo``,            the name matches a declared destination's host
``socket.gethostbyname(_ex)``
``socket.gethostbyaddr``,          a name as above; an address only a declared host's, or one
``socket.getnameinfo``             resolved here from a declared name
``socket.bind``,                   never: a tool connects where it declares, it does not listen
``socket.listen``                  (a socket that was never bound is bound when it listens)
``open`` for writing,              never for a read, ``prepare`` or ``lookup``; in a ``commit``,
``os.remove``, ``os.rename``, ...  a path the call's ``write("file:/...")`` effects cover
``subprocess.Popen``,              never: a child process is out of reach of every check here,
``os.system``, ``os.exec``, ...,   and so are a process pool's workers (these two events, and
``_posixsubprocess.fork_exec``,    ``socket.listen`` and two of ``signal``'s, are raised by the
``airlock.process_pool``           hook's own wrappers: Python 3.11 raises none)
``os.kill``, ``signal.*``,         never: a tool does not signal processes (or threads) or change
``os.putenv``, ...                 the host's environment
a :class:`Credential` revealed     a name the tool declares (its tenant's one, when the tool
                                   declares ``tenant_credentials``)
=================================  ===============================================================

What is not allowed raises :class:`UndeclaredReachError` (a ``PermissionError``) inside the
tool's code, before the operation happens, and is recorded on the call: the call then fails
with ``denied`` (:meth:`CallCheck.denial`) even when the tool's code caught the error itself.

Attribution is by context, not by address. Code outside every tool call (the audit store, the
ledger, the Docker client, the bridge) has no current call and is never checked; code inside
one is the tool's, so a loopback service is a destination like any other and a tool reaches it
only when it declares it (``http://127.0.0.1:8400``). The import system's bytecode cache and
the ``logging`` module's own files are the process's, not the tool's. What the hook cannot
see (C code that bypasses Python's socket and file functions, threads the tool starts, ...)
is written down in SECURITY.md.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, NoReturn

from airlock.policies import Effect, glob_regex
from airlock.tools import _egress_hook as _hook
from airlock.tools._destination import Destination, destination_of, parse_destination
from airlock.tools._egress_hook import (
    CHECKED_EVENTS,
    CURRENT,
    FILE_PREFIX,
    ReachKind,
    UndeclaredReachError,
    Violation,
    check_credential,
    violated,
)
from airlock.tools._errors import DeniedError
from airlock.tools._invoke import invoke
from airlock.tools._resolved import address_text, host_name, names_of

if TYPE_CHECKING:
    from airlock.tools._admission import CallTrail
    from airlock.tools._spec import ToolSpec

__all__ = [
    "CHECKED_EVENTS",
    "CallCheck",
    "DeclaredReach",
    "Phase",
    "ReachKind",
    "UndeclaredReachError",
    "Violation",
    "check_credential",
    "checked_invoke",
    "enter",
    "leave",
    "reach_of",
    "violated",
]

_log = logging.getLogger("airlock.tools")

Phase = Literal["handler", "prepare", "commit", "lookup"]
"""Which of a tool's code runs: a read's handler, or a write tool's three functions. Only a
``commit`` may write files (those its ``write("file:...")`` effects name)."""

_MAX_VIOLATIONS: Final = 16
"""Violations kept per call; the first decides the answer, the rest go to the detail."""


@dataclass(frozen=True, slots=True)
class DeclaredReach:
    """What one tool declares it reaches, read from its spec once (:meth:`of`)."""

    tool: str
    destinations: tuple[Destination, ...]
    """Its declared destinations and the ``network`` effects without placeholders."""
    network: tuple[Effect, ...]
    """Its ``network`` effects with placeholders: their destinations are known per call."""
    credentials: frozenset[str]
    tenant_credentials: Mapping[str, str]

    @classmethod
    def of(cls, spec: ToolSpec) -> DeclaredReach:
        """The reach ``spec`` declares.

        Raises:
            ValueError: a destination or a ``network`` effect without placeholders names no
                destination (registration refuses such a tool, with this message).
        """
        destinations = [parse_destination(text) for text in spec.destinations]
        placeholders = []
        for effect in spec.effects:
            if effect.kind != "network":
                continue
            if effect.placeholders:
                placeholders.append(effect)
                continue
            found = destination_of(effect.target)
            if found is None:
                raise ValueError(
                    f"effect {effect} names no host, port or URL that a connection can be "
                    "compared with; write network('api.example.com') or a URL"
                )
            destinations.append(found)
        for destination in destinations:
            if destination.every_host:
                raise ValueError(
                    f"destination {destination.text!r} stands for every host; name the hosts "
                    "the tool reaches ('api.example.com', '*.cdn.example.com')"
                )
        return cls(
            tool=spec.name,
            destinations=tuple(destinations),
            network=tuple(placeholders),
            credentials=frozenset(spec.credentials),
            tenant_credentials=MappingProxyType(dict(spec.tenant_credentials)),
        )

    def check(
        self,
        *,
        phase: Phase,
        tenant: str,
        values: Mapping[str, Any] | None = None,
        effects: Iterable[Effect | str] = (),
    ) -> CallCheck:
        """The check of one call by a principal of ``tenant``: a read's, whose validated
        arguments are ``values``, or a write step's, whose resolved effects are ``effects``
        (a preview's, as text, for ``commit`` and ``lookup``)."""
        # (Positional: a check is made for every call.)
        return CallCheck(self, phase, tenant, values, tuple(effects))


class CallCheck:
    """The current call, as the audit hook sees it: what it may reach, what it tried.

    Built per call (:meth:`DeclaredReach.check`), made current with :func:`enter` around the
    tool's code and :func:`leave` after it; then :meth:`denial` says whether the call must
    fail. Destinations of effects resolved for the call are read only when a connection
    needs them.
    """

    __slots__ = (
        "_files",
        "_reachable",
        "closed",
        "effects",
        "phase",
        "reach",
        "tenant",
        "values",
        "violations",
    )

    def __init__(
        self,
        reach: DeclaredReach,
        phase: Phase,
        tenant: str,
        values: Mapping[str, Any] | None,
        effects: tuple[Effect | str, ...],
    ) -> None:
        self.reach = reach
        self.phase = phase
        self.tenant = tenant
        self.values = values
        self.effects = effects
        self.violations: list[Violation] = []
        self.closed = False
        """Set once the tool's code has returned: later attempts are still refused, and
        logged, but can no longer change the call's answer."""
        self._reachable: tuple[Destination, ...] | None = None
        self._files: tuple[str, ...] | None = None

    # -- what the call may reach ---------------------------------------------------------

    def destinations(self) -> tuple[Destination, ...]:
        """The declared destinations and those of the call's resolved ``network`` effects."""
        if self._reachable is None:
            found = list(self.reach.destinations)
            if self.reach.network:  # per-call targets: only a tool with such effects has them
                for kind, target in (*_kinds_and_targets(self.effects), *self._resolved()):
                    if kind == "network":
                        destination = destination_of(target)
                        if destination is not None and not destination.every_host:
                            found.append(destination)
            self._reachable = tuple(found)
        return self._reachable

    def _resolved(self) -> Iterable[tuple[str, str]]:
        """The call's ``network`` effects with placeholders, resolved from its arguments (a
        value that does not resolve names no destination: admission refused it already)."""
        if self.values is None:
            return
        for effect in self.reach.network:
            try:
                resolved = effect.resolve_all(self.values)
            except ValueError:
                continue
            for one in resolved:
                yield one.kind, one.target

    def files(self) -> tuple[str, ...]:
        """Patterns (``file:/var/reports/*``) of the files the call may write: a commit's
        resolved ``write`` effects on ``file:`` resources; nothing in any other phase."""
        if self._files is None:
            self._files = (
                tuple(
                    target
                    for kind, target in _kinds_and_targets(self.effects)
                    if kind == "write" and target.startswith(FILE_PREFIX)
                )
                if self.phase == "commit"
                else ()
            )
        return self._files

    def allows_address(self, host: str, port: int) -> bool:
        """Whether a connection to ``host`` (an address, or a name) and ``port`` is declared."""
        address = address_text(host)
        names = (host_name(host),) if address is None else (address, *names_of(address))
        return any(
            not d.is_unix and d.allows_port(port) and any(d.matches_host(n) for n in names)
            for d in self.destinations()
        )

    def allows_name(self, name: str) -> bool:
        """Whether looking up ``name`` is declared: some destination's host matches it."""
        host = host_name(name)
        return any(d.matches_host(host) for d in self.destinations())

    def allows_unix(self, path: str) -> bool:
        """Whether connecting to the Unix socket at ``path`` is declared."""
        return any(
            d.is_unix and (d.path == path or glob_regex(d.path).fullmatch(path) is not None)
            for d in self.destinations()
        )

    def allows_file(self, path: str) -> bool:
        """Whether writing the file at ``path`` (absolute, symbolic links resolved) is one of
        the call's declared ``write("file:...")`` effects."""
        text = FILE_PREFIX + path
        return any(glob_regex(pattern).fullmatch(text) is not None for pattern in self.files())

    def allows_credential(self, name: str) -> bool:
        """Whether the tool declares the credential ``name`` for this call's tenant."""
        by_tenant = self.reach.tenant_credentials
        if by_tenant:
            return by_tenant.get(self.tenant) == name
        return name in self.reach.credentials

    # -- what it tried -------------------------------------------------------------------

    def refuse(self, kind: ReachKind, target: str, event: str, action: str) -> NoReturn:
        """Record the violation and raise it where the tool's code tried it.

        Raises:
            UndeclaredReachError: always.
        """
        violation = Violation(kind=kind, target=target[:300], action=action[:400], event=event)
        if self.closed:
            _log.warning(
                "tool %s tried to %s after its call ended (%s); refused",
                self.reach.tool,
                violation.action,
                event,
            )
        elif len(self.violations) < _MAX_VIOLATIONS:
            self.violations.append(violation)
        raise UndeclaredReachError(violation)

    def denial(
        self, trail: CallTrail | None = None, *, outcome: Literal["error", "unknown"] = "error"
    ) -> DeniedError | None:
        """The ``denied`` answer of a call that reached what it does not declare, naming what
        it reached first; ``None`` when it reached nothing undeclared. ``outcome`` is
        ``unknown`` for a commit (the write may have happened before it was stopped). The
        call's ``trail``, if given, is marked (:meth:`mark`)."""
        if not self.violations:
            return None
        if trail is not None:
            self.mark(trail)
        first = self.violations[0]
        forbidden = first.kind == "process"
        why = "which tools may not do" if forbidden else "which it does not declare"
        more = "; ".join(v.action for v in self.violations[1:])
        declared = ", ".join(d.text for d in self.destinations()) or "none"
        return DeniedError(
            f"this tool tried to {first.action}, {why}, and was stopped; do not retry it "
            "(the tool's owner must change the tool or what it declares)",
            reason="effect",
            outcome=outcome,
            detail=(
                f"runtime check of {self.reach.tool} ({self.phase}): {first.event}: "
                f"{first.action} is not declared (declared destinations: {declared})"
                + (f"; then also: {more}" if more else "")
            )[:1000],
        )

    def mark(self, trail: CallTrail) -> None:
        """Say on the call's audit trail what the runtime check decided, if it refused: the
        decision ``deny``, the rule (``runtime:network``...) and what it tried to reach
        among the call's effects."""
        if not self.violations:
            return
        trail.decision, trail.rule = "deny", self.violations[0].rule
        tried = tuple(e for e in (v.effect for v in self.violations) if e is not None)
        trail.effects = (*trail.effects, *dict.fromkeys(tried))


# -- the current call ------------------------------------------------------------------------


def enter(check: CallCheck) -> contextvars.Token[CallCheck | None]:
    """Make ``check`` the current call of this context (installing the hook on first use);
    pass the token to :func:`leave` once the tool's code has returned."""
    if not _hook.installed:
        _hook.install()
    return CURRENT.set(check)


def leave(token: contextvars.Token[CallCheck | None], check: CallCheck) -> None:
    """End ``check``'s turn as the current call (``token`` from :func:`enter`)."""
    check.closed = True
    CURRENT.reset(token)


async def checked_invoke(check: CallCheck, fn: Callable[..., Any], /, *args: Any) -> Any:
    """:func:`~airlock.tools._invoke.invoke` ``fn`` with ``check`` as the current call (a
    sync function's worker thread gets a copy of this context, and so the check)."""
    token = enter(check)
    try:
        return await invoke(fn, *args)
    finally:
        leave(token, check)


_REACHES: dict[int, tuple[ToolSpec, DeclaredReach]] = {}


def reach_of(spec: ToolSpec) -> DeclaredReach:
    """:meth:`DeclaredReach.of` a registered spec, remembered for it (the last 1,024 specs
    asked about), as the write path asks on every step.

    Raises:
        ValueError: as :meth:`DeclaredReach.of` (never for a registered spec).
    """
    hit = _REACHES.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    reach = DeclaredReach.of(spec)
    if len(_REACHES) >= 1024:
        _REACHES.clear()
    _REACHES[id(spec)] = (spec, reach)
    return reach


def _kinds_and_targets(effects: Iterable[Effect | str]) -> Iterable[tuple[str, str]]:
    for effect in effects:
        if isinstance(effect, Effect):
            yield effect.kind, effect.target
        else:
            kind, _, rest = effect.partition("(")
            if rest.endswith(")"):
                yield kind, rest[:-1]
