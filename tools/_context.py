"""The context of one tool call: who, under which authority, from where, until when."""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, NoReturn, get_args

from airlock.policies import ApprovalPolicy, Grant, Principal
from airlock.tools._errors import NotFoundError

__all__ = ["CALLERS", "CallContext", "Caller", "Observations", "RunAuthority"]

Caller = Literal["direct", "code"]
"""Who made the call: the model directly, or a program running in the sandbox."""
CALLERS: Final[tuple[Caller, ...]] = get_args(Caller)


class Observations:
    """What a run has observed: successful calls of tools that others require as evidence.

    Only the registry records into it, after a call succeeded, so a model cannot forge
    evidence. Bounded: the oldest observations are forgotten first.
    """

    def __init__(self, *, max_entries: int = 10_000) -> None:
        self._entries: deque[tuple[str, tuple[tuple[str, object], ...]]] = deque(maxlen=max_entries)
        self._lock = threading.Lock()

    def record(self, tool: str, args: Mapping[str, object]) -> None:
        """Note that ``tool`` succeeded with the validated arguments ``args``."""
        with self._lock:
            self._entries.append((tool, tuple(args.items())))

    def has(self, tool: str, match: Mapping[str, object]) -> bool:
        """Whether ``tool`` succeeded with arguments that include every pair of ``match``."""
        with self._lock:
            entries = list(self._entries)
        for name, pairs in reversed(entries):
            if name == tool:
                seen = dict(pairs)
                if all(k in seen and seen[k] == v for k, v in match.items()):
                    return True
        return False


@dataclass(frozen=True, slots=True, kw_only=True)
class CallContext:
    """Everything about a call that does not come from the model's arguments.

    The harness or the bridge builds one per call; the registry passes it to a handler that
    asks for it (a leading parameter annotated ``CallContext``).
    """

    principal: Principal
    """Who the run acts for; from the session, never from arguments."""
    grant: Grant
    """The run's authority, cap(u)."""
    run_id: str
    """The run this call belongs to (audit log key)."""
    caller: Caller
    """``direct`` (the model) or ``code`` (a sandboxed program)."""
    call_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Unique id of this call within the run."""
    deadline: float = math.inf
    """When the run's time budget ends, on the :func:`time.monotonic` clock."""
    approvals: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    """Approval rules; by default read-only calls are allowed and side effects need approval."""
    observations: Observations | None = None
    """The run's evidence for preconditions; ``None`` means no evidence exists."""

    def __post_init__(self) -> None:
        if self.caller not in CALLERS:
            _refuse_caller(self.caller)

    def remaining(self) -> float:
        """Seconds left in the run's budget (negative when it is over)."""
        return self.deadline - time.monotonic()

    def ensure_tenant(self, tenant_id: str) -> None:
        """Record-level check for handlers: a record of another tenant is "not found".

        Raises:
            NotFoundError: ``tenant_id`` is not the principal's; identical to a missing record.
        """
        if tenant_id != self.principal.tenant_id:
            raise NotFoundError(detail=f"record belongs to tenant {tenant_id!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunAuthority:
    """What every call of one run is admitted with, fixed by the host for the run: the one
    place a :class:`CallContext` is made, for the model's direct calls and a program's
    calls from code alike."""

    principal: Principal
    """Who the run acts for; from the session, never from arguments."""
    grant: Grant
    """The run's authority, cap(u)."""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """The run every call belongs to (audit log key)."""
    approvals: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    """Approval rules of the run."""
    observations: Observations | None = None
    """The run's evidence for preconditions, shared by all its calls."""

    def context(self, caller: Caller, call_id: str, *, deadline: float = math.inf) -> CallContext:
        """The context of one call by ``caller``.

        Raises:
            ValueError: ``caller`` is not one of :data:`CALLERS`.
        """
        made: CallContext = _ContextBuilder(  # type: ignore[assignment]  # (it is one)
            self.principal,
            self.grant,
            self.run_id,
            caller,
            call_id,
            deadline,
            self.approvals,
            self.observations,
        )
        return made


class _ContextBuilder:
    """Makes a :class:`CallContext`: ``_ContextBuilder(...)`` *is* one, fields in order.

    A frozen dataclass sets each field through ``object.__setattr__``, and a run makes a
    context for every call. This class has the same slots without the frozen
    ``__setattr__``: it sets them directly, checks the caller as ``CallContext`` does, then
    makes the object the :class:`CallContext` it is (the layouts are the same, so its class
    may be assigned; a test holds the two in step)."""

    __slots__ = CallContext.__slots__

    def __init__(
        self,
        principal: Principal,
        grant: Grant,
        run_id: str,
        caller: Caller,
        call_id: str,
        deadline: float,
        approvals: ApprovalPolicy,
        observations: Observations | None,
    ) -> None:
        if caller not in CALLERS:
            _refuse_caller(caller)
        self.principal = principal
        self.grant = grant
        self.run_id = run_id
        self.caller = caller
        self.call_id = call_id
        self.deadline = deadline
        self.approvals = approvals
        self.observations = observations
        self.__class__ = CallContext  # type: ignore[assignment]


def _refuse_caller(caller: object) -> NoReturn:
    raise ValueError(f"caller {caller!r} must be one of {CALLERS}")
