"""A session: one model conversation's tools and the answers to its tool calls.

The application creates a session for a principal it authenticated (never one the model
names); the model sees :meth:`Session.tools` and every call it makes goes through
:meth:`Session.call`, which never raises for anything the model did::

    call(name, arguments)
    ├── execute_code ─► inputs ⊆ grant (read(file:NAME)), else denied before any container
    │                   ─► sandbox run with a ToolSession (reads only, caller "code")
    │                   ─► final value + capped stdout + artifact references,
    │                      or program_error / limit_exceeded
    ├── direct read  ─► WritePath.call(caller "direct") ─► shaped result
    │                   └─ a rule asks about it ─► needs_approval (the pause, as a write's)
    ├── direct write ─► WritePath.call ─► needs_approval (the pause; recorded)
    │                   └─ approved by a policy rule ─► commit at once ─► receipt
    ├── the same intent again, already committed ─► already_committed + its receipt
    └── anything else ─► unknown_tool

A program may also *propose* writes (``tools.propose.NAME(...)``) that the tool's contract
and the grant allow: its result then carries one note about them as a batch, and
:meth:`Session.resume` with the batch id commits each item a person approved, once.

A paused write goes on with :meth:`Session.resume` once a person (``airlock approvals
approve``, :func:`airlock.tools.approve_preview`) or a policy approved it: the session commits once
and returns the receipt; a denial returns ``denied``; still waiting returns
``needs_approval`` again. Nor need the model ask: each call first finishes the writes decided
meanwhile (:meth:`Session.settle_writes`; ``serve`` and ``chat`` also run
:meth:`Session.watch_writes`), and its answer carries their outcomes under ``settled_writes``.
Pending writes live in the ledger under the session's run id, so another process can
rebuild the session (:meth:`Harness.resume_session`) and resume them.

``needs_approval`` is answered with ``is_error=False``: the call did what it should (a
preview now waits for a person), and an error flag invites a model to retry with other
arguments, which is exactly what must not happen.

Inputs (host files mounted read-only at ``/data/NAME``) are given by the application, never
by the model: for the whole session (``Harness.session(inputs=...)``, listed in
``execute_code``'s description) or for one program (:meth:`Session.execute_code`). Reading
one is the effect ``read(file:NAME)``, which the session's grant must cover; they need the
``full`` language mode (a restricted program opens no file). The files a
program leaves in ``/out`` are stored under ``$AIRLOCK_HOME/artifacts/RUN-mN-NONCE/`` (one
directory per program) and answered as references, never as content.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from airlock.bridge import render_api
from airlock.harness._approval_pause import ApprovalPause
from airlock.harness._batches import PausedBatches
from airlock.harness._budget import Budget
from airlock.harness._call_budget import CallBudget
from airlock.harness._commit_authority import CommitAuthority
from airlock.harness._direct_tools import direct_tools
from airlock.harness._execute_code import EXECUTE_CODE, describe_execute_code
from airlock.harness._model_tools import ModelResult, ModelTool
from airlock.harness._paused import PausedWrites
from airlock.harness._programs import SessionPrograms
from airlock.harness._results import (
    PROGRAM_KEPT,
    PROGRAM_SMALLER,
    KeptNotes,
    failure,
    from_ledger_error,
    from_tool_error,
    nothing_kept,
    success,
)
from airlock.harness._session_audit import SessionAudit
from airlock.harness._usable import needs_ledger, usable
from airlock.harness._write_notes import WRITE_KEPT, write_notes
from airlock.policies import ApprovalPolicy, Grant, Principal, SandboxProfile, UsageError
from airlock.sandbox import (
    Inputs,
    RunInput,
    SandboxBackend,
    SandboxError,
)
from airlock.tools import (
    CallContext,
    Caller,
    InvalidInputError,
    LedgerError,
    Observations,
    Preview,
    Registry,
    RunAuthority,
    ToolError,
    UnknownToolError,
    WritePath,
    escape_controls,
)

__all__ = ["Session"]

_log = logging.getLogger("airlock.harness")


class Session(ApprovalPause):
    """One conversation: principal, grant, budget, run id, and the tools the model may call.

    Build it with :meth:`Harness.session`; it implements
    :class:`~airlock.ModelToolSurface`. :meth:`call` is safe to run concurrently for
    several calls of one model turn.
    """

    def __init__(
        self,
        *,
        registry: Registry,
        sandbox: SandboxBackend,
        writes: WritePath | None,
        profile: SandboxProfile,
        principal: Principal,
        grant: Grant,
        approvals: ApprovalPolicy,
        budget: Budget,
        run_id: str | None = None,
        keep_state: bool = False,
        idle_timeout: float = 300.0,
        inputs: Inputs | None = None,
        artifact_root: Path | None = None,
    ) -> None:
        self.principal = principal
        self.grant = grant
        self.approvals = approvals
        self.budget = budget
        self.run_id = run_id or "run_" + uuid.uuid4().hex
        self._registry = registry
        self._sandbox = sandbox
        self._writes = writes
        self._profile = profile
        self._audit = SessionAudit(registry.audit)
        self._calls = CallBudget(
            budget, run_id=self.run_id, audit=self._audit, context=self._context
        )
        self._meter = self._calls.meter
        self._observations = Observations()
        self._authority = RunAuthority(
            principal=principal,
            grant=grant,
            run_id=self.run_id,
            approvals=approvals,
            observations=self._observations,
        )
        judge = CommitAuthority(principal=principal, grant=grant, approvals=approvals)
        self._paused = PausedWrites(
            writes, principal, self.run_id, authority=judge, context=self._approved_read_context
        )
        self._batches = PausedBatches(writes, principal, self.run_id, authority=judge)
        self._keep_state = keep_state
        self._idle_timeout = idle_timeout
        self._direct = self._usable_names("direct")
        self._code = self._usable_names("code")
        self._proposable = self._proposable_names()
        self._closed = False
        self._programs = SessionPrograms(
            registry=registry,
            sandbox=sandbox,
            profile=profile,
            principal=principal,
            grant=grant,
            approvals=approvals,
            budget=budget,
            run_id=self.run_id,
            observations=self._observations,
            audit=self._audit,
            code_tools=self._code,
            keep_state=keep_state,
            idle_timeout=idle_timeout,
            given=dict(inputs or {}),
            artifact_root=artifact_root,
            writes=writes,
            proposable=self._proposable,
            batches=self._batches,
        )
        self._tools = self._build_tools()

    @property
    def inputs(self) -> tuple[RunInput, ...]:
        """The inputs every program of this session finds under ``/data``."""
        return self._programs.inputs

    # -- the tool list -------------------------------------------------------------------

    def _usable_names(self, caller: Caller) -> frozenset[str]:
        names = set()
        for definition in self._registry.visible(self.principal, caller):
            spec = self._registry.get(definition.name)
            if spec is None or not usable(spec, self.grant, self.approvals):
                continue
            if self._writes is None and needs_ledger(spec, self.grant, self.approvals):
                continue  # no ledger, no preview to approve: the call could only be refused
            names.add(definition.name)
        return frozenset(names)

    def _proposable_names(self) -> frozenset[str]:
        """Write tools this session's programs may propose: the tool's contract allows it,
        the principal sees it, the grant has its scope and lists it in ``propose``."""
        if self._writes is None:
            return frozenset()
        names = set()
        for definition in self._registry.visible(self.principal, "direct"):
            spec = self._registry.get(definition.name)
            if (
                spec is not None
                and spec.write is not None
                and spec.write.proposable
                and self.grant.allows_scope(spec.scope)
                and self.grant.allows_proposal(spec.name)
            ):
                names.add(spec.name)
        return frozenset(names)

    def _build_tools(self) -> list[ModelTool]:
        api = render_api(
            self._registry, self.principal, names=self._code, proposals=self._proposable
        )
        listed = [
            describe_execute_code(
                api,
                self._profile,
                result_bytes=self.budget.result_bytes,
                stdout_bytes=self.budget.stdout_bytes,
                calls=self.budget.program_calls,
                kept_idle_s=self._idle_timeout if self._keep_state else None,
                reaches_network=any(
                    spec.reaches_network
                    for spec in map(self._registry.get, self._code)
                    if spec is not None
                ),
                inputs=self._programs.inputs,
                proposes=bool(self._proposable),
            )
        ]
        listed.extend(direct_tools(self._registry, self.principal, names=self._direct))
        return listed

    def tools(self) -> list[ModelTool]:
        """The tools this session's principal may use, ``execute_code`` first."""
        return list(self._tools)

    # -- calls ---------------------------------------------------------------------------

    async def call(self, name: str, arguments: dict[str, Any]) -> ModelResult:
        """Run one model tool call to its model-facing result; never raises for tool errors,
        nor for an audit log that cannot store the call (``ledger_*``: the answer is withheld).

        Every result, error or not, is at most the budget's ``result_bytes``: a larger one
        is ``result_too_large`` with its size. One that what is left of its ``bytes`` cannot
        hold is ``limit_exceeded`` (limit ``bytes``), with its size. Either keeps what a
        program proposed and the files it left, shortened to fit (at last only counts: under
        a kilobyte whatever the cap), and a write's preview (or batch) id and status.
        """
        return await self._call(name, arguments)

    async def execute_code(self, code: str, *, inputs: Inputs | None = None) -> ModelResult:
        """Run ``code`` as the model's ``execute_code`` would, with ``inputs`` (name -> host
        path, mounted read-only at ``/data/NAME``) beside the session's own, for this
        program only. Audited, budgeted and answered like :meth:`call`.

        An input outside the grant answers ``denied`` and starts nothing.

        Raises:
            InputRefused: an input cannot be mounted (a missing file, a link, a device...)
                or has a session input's name with another path.
            UsageError: inputs for one program in a session that keeps state (a kept
                container's inputs are mounted when it starts: give them to
                ``Harness.session``), or under the restricted language mode (a restricted
                program cannot open files: use ``language_mode='full'``).
        """
        given = self._programs.call_inputs(inputs)
        return await self._call(EXECUTE_CODE, {"code": code}, inputs=given)

    async def _call(
        self, name: str, arguments: dict[str, Any], *, inputs: Inputs | None = None
    ) -> ModelResult:
        if self._closed:  # (a call it cut short was answered sandbox_unavailable)
            raise UsageError("this session is closed; open another with Harness.session()")
        call_id = await self._calls.admit(str(name))
        if isinstance(call_id, ModelResult):
            return call_id  # the budget is used up
        keep: KeptNotes = nothing_kept
        says = PROGRAM_KEPT
        try:
            if self._paused.waiting() or self._batches.waiting():
                await self._settle(until=self._meter.deadline)  # no send past the budget
            if not isinstance(arguments, Mapping):
                raise InvalidInputError("the arguments must be a JSON object")
            if name == EXECUTE_CODE:
                result, keep = await self._programs.run(
                    arguments,
                    call_id=call_id,
                    inputs=self._programs.given if inputs is None else inputs,
                    remaining=self._meter.remaining(),
                    ctx=self._context(call_id),
                )
            elif isinstance(name, str) and name in self._direct:
                result, keep = await self._call_direct(name, arguments, call_id)
                says = WRITE_KEPT
            else:
                self._audit.unknown_tool(self._context(call_id), str(name))
                raise UnknownToolError(name=str(name), detail="not in this session's tool list")
        except ToolError as exc:
            if exc.detail:  # (on one line: what a tool's error says cannot forge another)
                detail = escape_controls(exc.detail)
                _log.info("run %s call %s: %s (%s)", self.run_id, call_id, exc.code, detail)
            result = from_tool_error(exc)
        except LedgerError as exc:
            # The message names a host path: the operator's log gets it, the model does not.
            _log.error("run %s call %s: %s (%s)", self.run_id, call_id, exc.code, exc)
            result = from_ledger_error(exc)
        except SandboxError as exc:
            _log.warning("run %s: the sandbox could not run a program: %s", self.run_id, exc)
            retryable = exc.retryable
            result = failure(
                "sandbox_unavailable",
                "the sandbox could not run the program; "
                + ("try again shortly" if retryable else "do not retry: the operator must act"),
                retryable=retryable,
            )
        # Stored before the answer is given (a crash then loses nothing of the call); else
        # withheld, settled outcomes too (a later answer tells them).
        withheld = await self._calls.withheld(f"call {call_id}")
        if withheld is not None:
            return self._calls.account(withheld)
        told = self._paused.with_settled(result, cap=self._calls.cap())
        smaller = PROGRAM_SMALLER if name == EXECUTE_CODE else None
        return self._calls.account(told, keep=keep, says=says, smaller=smaller)

    async def close(self) -> None:
        """Release what the session holds (its kept container, in session mode). A call
        after it raises ``UsageError``; one it cuts short answers ``sandbox_unavailable``."""
        self._closed = True
        await self._programs.close()

    def _context(self, call_id: str) -> CallContext:
        return self._authority.context("direct", call_id, deadline=self._meter.deadline)

    def _approved_read_context(self, call_id: str) -> CallContext:
        # An approved read runs as an approved write commits: under the tool's own timeout,
        # not the session's deadline. A person may approve it after the session's time is
        # up, and the read would fail at once, its approval spent (settling within a call
        # starts no read past the call's deadline).
        return self._authority.context("direct", call_id)

    async def _call_direct(
        self, name: str, arguments: Mapping[str, Any], call_id: str
    ) -> tuple[ModelResult, KeptNotes]:
        """A direct call's answer, and what it keeps if it is refused (a write's preview)."""
        ctx = self._context(call_id)
        if self._writes is None:
            return success(await self._registry.call(name, arguments, ctx)), nothing_kept
        outcome = await self._writes.call(name, arguments, ctx)
        if not isinstance(outcome, Preview):
            return success(outcome), nothing_kept  # a read that needed no approval
        preview = outcome
        if preview.state == "committed":  # asked again: say so, send nothing
            answer = self._paused.already(preview)
        elif (in_batch := self._batches.held_item(preview)) is not None:
            answer = in_batch  # it waits in a batch: held, committed and told there once
        else:
            self._paused.hold(preview)
            if preview.state == "prepared":
                answer = self._paused.paused(preview)
            else:  # approved by a policy rule (or the same intent was prepared before)
                answer = await self._paused.finish(preview.id)
        return answer, write_notes(answer)

    @classmethod
    def restore(
        cls,
        harness: SessionSource,
        principal: Principal,
        run_id: str,
        *,
        grant: Grant | None = None,
        budget: Budget | None = None,
    ) -> Session:
        """A session of ``run_id`` rebuilt from the ledger (see
        :meth:`Harness.resume_session`)."""
        return harness.resume_session(principal, run_id, grant=grant, budget=budget)


class SessionSource(Protocol):
    """What :meth:`Session.restore` needs of a :class:`~airlock.Harness`."""

    def resume_session(
        self,
        principal: Principal,
        run_id: str,
        *,
        grant: Grant | None = None,
        budget: Budget | None = None,
    ) -> Session: ...
