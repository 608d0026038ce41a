"""The harness: the composition root that turns a model's proposals into admitted calls,
sandboxed programs and write previews, one :class:`~airlock.Session` per conversation."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path

from airlock.harness._budget import Budget
from airlock.harness._database import durable_audit
from airlock.harness._execute_code import EXECUTE_CODE
from airlock.harness._home import airlock_home
from airlock.harness._run_ids import check_run_id
from airlock.harness._session import Session
from airlock.policies import (
    Grant,
    Policy,
    Principal,
    SandboxProfile,
    UsageError,
    approval_cases,
    refusal,
)
from airlock.sandbox import Inputs, SandboxBackend
from airlock.tools import AuditStore, LedgerStore, Registry, WritePath

__all__ = ["Harness", "NoToolsWarning"]


class NoToolsWarning(UserWarning):
    """A session reaches no tool of the registry: the model gets ``execute_code`` with an
    empty ``tools`` namespace. Usually the :class:`~airlock.policies.Principal` lacks the
    scopes its tools need, or the policy grants it nothing; :attr:`reason` says which."""

    def __init__(self, principal: Principal, reason: str) -> None:
        scopes = ", ".join(sorted(principal.scopes)) or "none"
        super().__init__(
            f"principal {principal.user_id!r} in tenant {principal.tenant_id!r} (scopes: "
            f"{scopes}) reaches no tool: {reason}; give the Principal the scopes its tools "
            "need and check that the policy grants them"
        )
        self.user_id = principal.user_id
        self.tenant_id = principal.tenant_id
        self.scopes = principal.scopes
        self.reason = reason


class Harness:
    """Tools, policy, sandbox and ledger of one deployment.

    Args:
        registry: the tools. With a ``ledger`` and no write path yet, the harness attaches
            one on it (``WritePath(registry, ledger)``).
        policy: grants and approval rules per principal (``load_policy``).
        sandbox: what runs ``execute_code`` programs (``DockerBackend``; ``ScriptedBackend``
            in tests). The harness does not start or close it.
        ledger: the write path's durable store (``SQLiteLedgerStore``): previews of writes,
            and of reads the approval rules ask about; ``None`` when the deployment has no
            writes, and then write tools (and reads that always wait for approval) are not
            offered.
        writes: an already attached write path to use instead of building one (it must be
            on ``ledger``).
        audit: where the audit log is written when the registry has no store of its own
            (``Registry()`` without ``audit=``); the SQLite store ``audit.db`` under
            ``$AIRLOCK_HOME`` when omitted (``MemoryAuditStore()`` keeps it in memory). A
            session's calls are durable in it before their answers return.
        profile: the sandbox profile of programs; the sandbox's own when omitted.
        budget: the default budget of a session.
        ttl: seconds a preview stays committable, for the write path the harness builds.
        clock: wall-clock time for the write path the harness builds (tests move it).
        idle_timeout: seconds a kept container (``keep_state`` sessions) waits for the next
            program before it is removed.
        artifacts: where the files programs leave in ``/out`` are stored, one directory per
            program; ``$AIRLOCK_HOME/artifacts`` when omitted.

    Raises:
        UsageError: the registry already has another write path attached (pass it as
            ``writes``), or ``writes`` is on another ledger, or ``audit`` is given and the
            registry already writes to another store; code ``audit_store`` when the audit
            store cannot be opened (an older airlock's file, or its chain key is missing).
        MissingExtraError: ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (audit spans are exported
            over OTLP) and the ``otel`` extra is not installed.
    """

    def __init__(
        self,
        registry: Registry,
        policy: Policy,
        sandbox: SandboxBackend,
        ledger: LedgerStore | None = None,
        *,
        writes: WritePath | None = None,
        audit: AuditStore | None = None,
        profile: SandboxProfile | None = None,
        budget: Budget | None = None,
        ttl: float = 900.0,
        clock: Callable[[], float] = time.time,
        idle_timeout: float = 300.0,
        artifacts: Path | None = None,
    ) -> None:
        self.registry = registry
        self.artifacts = artifacts if artifacts is not None else airlock_home() / "artifacts"
        """Where programs' artifacts are stored (one directory per program)."""
        self.audit = durable_audit(registry, audit)
        """The registry's audit log, on its durable store."""
        self.policy = policy
        self.sandbox = sandbox
        self.budget = budget or Budget()
        self.idle_timeout = idle_timeout
        self.profile: SandboxProfile = profile or sandbox.profile
        if writes is not None:
            if ledger is not None and writes.ledger is not ledger:
                raise UsageError("writes= is on another ledger than ledger=; pass one ledger")
            self.writes: WritePath | None = writes
        elif ledger is not None:
            # Writes preview through it, and so do reads the approval rules ask about.
            self.writes = WritePath(registry, ledger, ttl=ttl, clock=clock)
        else:
            self.writes = None
        self.ledger = ledger if ledger is not None else (writes.ledger if writes else None)

    def session(
        self,
        principal: Principal,
        grant: Grant | None = None,
        *,
        budget: Budget | None = None,
        run_id: str | None = None,
        keep_state: bool = False,
        inputs: Inputs | None = None,
    ) -> Session:
        """A new session (one model conversation) acting for ``principal``.

        ``principal`` comes from the application's authentication, never from the model.
        ``grant`` defaults to the policy's grant for the principal; the approval rules are
        always the policy's. ``run_id`` defaults to a fresh one; one given (an id of the
        application's own, a conversation's say) is any text of 1 to 256 characters without
        a control character; its programs' artifact directories are named after it when it is
        a plain name, else after a plain prefix and a hash of it. ``keep_state`` runs the
        session's programs in one kept container (``DockerBackend.keep``), so they build on
        earlier state; call :meth:`Session.close` when the conversation ends. ``inputs``
        (name -> host file or directory) are mounted read-only at ``/data/NAME`` for every
        program of the session and listed in ``execute_code``'s description; the grant must
        cover ``read(file:NAME)`` for each, and the profile must be ``language_mode='full'``
        (a restricted program cannot open files). At most the budget's ``programs_at_once``
        programs of the session run at a time; further ones wait for a turn.

        Warns:
            NoToolsWarning: the session reaches no tool of the registry (the principal has
                no scopes, or its grant refuses every tool), so the model would get
                ``execute_code`` alone.

        Raises:
            UsageError: ``keep_state`` with a sandbox backend that cannot keep containers,
                ``inputs`` under the restricted language mode, or a ``run_id`` that is no
                run id (empty, over 256 characters, or holding a control character).
            InputRefused: an input is outside the grant or cannot be mounted.
        """
        if run_id is not None:
            check_run_id(run_id)  # before anything is made of it
        if keep_state and not self.sandbox.can_keep:
            raise UsageError(
                "keep_state needs a sandbox backend that can keep a container (DockerBackend), "
                f"not {type(self.sandbox).__name__}"
            )
        session = Session(
            registry=self.registry,
            sandbox=self.sandbox,
            writes=self.writes,
            profile=self.profile,
            principal=principal,
            grant=grant if grant is not None else self.policy.grant_for(principal),
            approvals=self.policy.approvals_for(principal),
            budget=budget or self.budget,
            run_id=run_id,
            keep_state=keep_state,
            idle_timeout=self.idle_timeout,
            inputs=inputs,
            artifact_root=self.artifacts,
        )
        if self.registry.specs() and all(t.name == EXECUTE_CODE for t in session.tools()):
            warnings.warn(NoToolsWarning(principal, self._why_no_tool(session)), stacklevel=2)
        return session

    def _why_no_tool(self, session: Session) -> str:
        """Why ``session`` offers no tool of the registry: the first tool's refusal."""
        if not session.principal.scopes:
            needed = sorted({spec.scope for spec in self.registry.specs()})
            return f"it has no scopes; its tools need one of {', '.join(needed)}"
        for spec in sorted(self.registry.specs(), key=lambda s: s.name):
            if not session.principal.has_scope(spec.scope):
                reason = f"the principal lacks scope {spec.scope!r}"
            else:
                cases = approval_cases(
                    spec.name,
                    spec.effects,
                    reversible=spec.reversible,
                    approvals=session.approvals,
                    grant=session.grant,
                )
                reason = refusal(spec.scope, spec.effects, cases, session.grant) or (
                    "it waits for an approval (a write, or a read the rules ask about) and "
                    "the harness has no ledger"
                )
            return f"every tool is refused, first {spec.name}: {reason}"
        return "the registry has no tools"

    def resume_session(
        self,
        principal: Principal,
        run_id: str,
        *,
        grant: Grant | None = None,
        budget: Budget | None = None,
    ) -> Session:
        """The session of ``run_id`` again, in this process, with its paused writes loaded
        from the ledger (only those of ``principal``); :meth:`Session.resume` goes on.

        Raises:
            UsageError: ``run_id`` is no run id (see :meth:`session`).
        """
        session = self.session(principal, grant, budget=budget, run_id=run_id)
        session.restore_pending()
        return session
