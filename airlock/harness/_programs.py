"""A session's programs: each ``execute_code`` run, with its inputs, limits and artifacts.

:class:`SessionPrograms` is the part of a :class:`~airlock.harness.Session` that runs
programs: it checks the inputs against the grant before any container starts (reading an
input is ``read(file:NAME)``; one outside the grant answers ``denied`` and is audited), runs
the program in a fresh container or the session's kept one, stores what the program left in
``/out`` in a directory of its own under the harness's artifact store, and records one audit
event per program with the inputs it was given. The writes a program proposed
(``tools.propose.NAME(...)``) become one batch in the ledger, and its result says so in one
short note (``proposals``: batch id, fingerprint, count, total per currency, preview ids),
however the program ended; a change already committed in the run is named in it, in no
batch. A ledger that cannot take the batch leaves the previews stored, each waiting as a
paused write of the session (``"status": "not_held"``, under the ledger's code).

At most the budget's ``programs_at_once`` programs of one session run at a time (each may
use the profile's whole memory and CPU, and one model turn may ask for many): a further one
waits for a turn until the session's time is up. What the host fails at (an input that went
away, a store that cannot take the files in ``/out``) is answered as the host's, by the
input's name, never a host path; the operator's log gets the whole message.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from airlock.bridge import BridgeLimits, ToolSession
from airlock.harness._batches import PausedBatches
from airlock.harness._budget import Budget
from airlock.harness._execute_code import execute_code_args, kept_notes, program_result
from airlock.harness._model_tools import ModelResult
from airlock.harness._program_endings import host_failure, unheld
from airlock.harness._proposal_notes import as_now, nothing_new_note, split_proposed, unheld_note
from airlock.harness._results import KeptNotes, failure, nothing_kept
from airlock.harness._run_ids import artifact_dir, check_run_id
from airlock.harness._session_audit import SessionAudit
from airlock.policies import ApprovalPolicy, Effect, Grant, Principal, SandboxProfile, UsageError
from airlock.sandbox import (
    ArtifactStoreFailed,
    InputRefused,
    Inputs,
    KeptSandbox,
    RunInput,
    RunResult,
    SandboxBackend,
    SandboxClosed,
    input_effect,
    resolve_inputs,
)
from airlock.tools import (
    CallContext,
    LedgerError,
    Observations,
    Registry,
    WritePath,
)

__all__ = ["SessionPrograms"]

_log = logging.getLogger("airlock.harness")


@dataclass(kw_only=True)
class SessionPrograms:
    """Runs one session's programs (see the module's docstring).

    Raises (when built):
        InputRefused: a session input is outside the grant (``grant``) or cannot be mounted.
        UsageError: ``run_id`` is empty, over 256 characters, or holds a control character.
    """

    registry: Registry
    sandbox: SandboxBackend
    profile: SandboxProfile
    principal: Principal
    grant: Grant
    approvals: ApprovalPolicy
    budget: Budget
    run_id: str
    observations: Observations
    audit: SessionAudit
    code_tools: frozenset[str]
    keep_state: bool = False
    idle_timeout: float = 300.0
    given: dict[str, Any] = field(default_factory=dict)
    """The session's inputs: name -> host path."""
    artifact_root: Path | None = None
    writes: WritePath | None = None
    """Where proposals from code go; without it, programs may propose nothing."""
    proposable: frozenset[str] = frozenset()
    """Write tools programs are offered under ``tools.propose``."""
    batches: PausedBatches | None = None
    """Where the batches of proposals wait for approval."""
    inputs: tuple[RunInput, ...] = field(init=False)
    """The session's inputs, checked: every program finds them under ``/data``."""
    _kept: KeptSandbox | None = field(init=False, default=None)
    _closed: bool = field(init=False, default=False)
    _turns: anyio.Semaphore = field(init=False)
    """Turns to run a program: the budget's ``programs_at_once``."""

    def __post_init__(self) -> None:
        check_run_id(self.run_id)  # it names the programs' artifact directories
        self._turns = anyio.Semaphore(self.budget.programs_at_once)
        _refuse_files_if_restricted(self.given, self.profile)
        for name in sorted(self.given):
            effect = input_effect(name)
            if not self.grant.covers(effect):
                raise InputRefused(
                    f"input {name!r} needs {effect} in the grant of "
                    f"{self.principal.user_id!r}; grant it in the policy file (effects = "
                    '["read(file:*)"] grants every input), or do not give it to this session',
                    name=name,
                    reason="grant",
                )
        self.inputs = resolve_inputs(self.given, limit_bytes=self.profile.input_limit_bytes)

    def call_inputs(self, extra: Inputs | None) -> dict[str, Any]:
        """The inputs of one program: the session's and ``extra``.

        Raises:
            InputRefused: an input of ``extra`` cannot be mounted, or has a session input's
                name with another path.
            UsageError: ``extra`` in a session that keeps state, or under the restricted
                language mode (its programs cannot open files).
        """
        added = dict(extra or {})
        _refuse_files_if_restricted(added, self.profile)
        for name, path in added.items():
            if name in self.given and Path(self.given[name]) != Path(path):
                raise InputRefused(
                    f"input {name!r} is the session's already ({self.given[name]!r}); give "
                    "this one another name",
                    name=name,
                    reason="name",
                )
        if self.keep_state and set(added) - set(self.given):
            raise UsageError(
                "a session that keeps state mounts its inputs when its container starts; "
                "give them to Harness.session(inputs=...)"
            )
        resolve_inputs(added, limit_bytes=self.profile.input_limit_bytes)
        return {**self.given, **added}

    async def run(
        self,
        arguments: Mapping[str, Any],
        *,
        call_id: str,
        inputs: Inputs,
        remaining: float,
        ctx: CallContext,
    ) -> tuple[ModelResult, KeptNotes]:
        """One ``execute_code`` call: ``remaining`` seconds of the session's budget are
        left, ``ctx`` is the call's direct context (for its audit records).

        Returns the result and what an answer too large for the model keeps of it (its
        proposals and artifacts: see :func:`kept_notes`).

        Raises:
            InvalidInputError: the arguments are not ``{code}``.
            SandboxError: the sandbox could not run the program.
        """
        args = execute_code_args(arguments)
        digest = self.audit.program_text(args.code)
        effects: list[Effect] = []
        for name in sorted(inputs):
            effect = input_effect(name)
            if not self.grant.covers(effect):
                # Before any container starts: the program never runs.
                self.audit.inputs_refused(ctx, effect, digest)
                denied = failure(
                    "denied",
                    f"this session may not read the input {name!r} ({effect} is not in its "
                    "grant); the program did not run",
                    reason="effect",
                    effect=str(effect),
                )
                return denied, nothing_kept
            effects.append(effect)
        began = time.perf_counter()
        turn = self._turns.value > 0  # (a free turn is taken without a timer, which costs more)
        if turn:
            self._turns.acquire_nowait()
        else:
            with anyio.move_on_after(max(remaining, 0.0)):
                # Never unbounded: at the latest, the session's time is up.
                await self._turns.acquire()
                turn = True
        if turn:
            try:
                return await self._run_program(
                    args.code,
                    digest,
                    effects,
                    call_id=call_id,
                    inputs=inputs,
                    remaining=remaining - (time.perf_counter() - began),
                    ctx=ctx,
                )
            finally:
                self._turns.release()
        at_once = self.budget.programs_at_once
        self.audit.program(
            ctx,
            digest,
            code="limit_exceeded",
            detail=f"did not run: {at_once} programs of the session ran until its time was up",
            duration_s=time.perf_counter() - began,
            effects=effects,
        )
        busy = failure(
            "limit_exceeded",
            f"this session runs at most {at_once} programs at once, and they ran until its "
            "time budget was used up; this program did not run. Finish with what you have",
            limit="programs_at_once",
        )
        return busy, nothing_kept

    async def _run_program(
        self,
        code: str,
        digest: str,
        effects: list[Effect],
        *,
        call_id: str,
        inputs: Inputs,
        remaining: float,
        ctx: CallContext,
    ) -> tuple[ModelResult, KeptNotes]:
        """One program, in its turn (see :meth:`run`)."""
        profile = self.profile
        session_s = self.budget.seconds if remaining < profile.timeout_s else None
        if session_s is not None:
            # The program may not outlive the session (and says so if that stops it); the
            # pool ignores the deadline.
            profile = profile.model_copy(update={"timeout_s": max(remaining, 0.5)})
        tools = ToolSession(
            registry=self.registry,
            principal=self.principal,
            grant=self.grant,
            run_id=self.run_id,
            approvals=self.approvals,
            limits=BridgeLimits(
                max_calls=self.budget.program_calls, max_proposals=self.profile.max_proposals
            ),
            observations=self.observations,
            tool_names=self.code_tools,
            call_prefix=call_id,  # the program's calls: RUN:mN:1, RUN:mN:2, ...
            writes=self.writes if self.proposable else None,
            proposable=self.proposable,
            durable_by_caller=True,  # (every answer waits for the log: Session._call)
        )
        began = time.perf_counter()
        notes: dict[str, object] = {}
        held_before = self.batches.holding() if self.batches is not None else set()
        artifacts = self._artifact_dir(call_id)
        run: RunResult | None = None
        try:
            if self.keep_state:
                kept = self._kept_sandbox()
                starts = kept.starts
                run = await kept.run(code, profile=profile, tools=tools, artifacts=artifacts)
                if starts and kept.starts > starts:
                    notes["state_reset"] = True  # earlier programs' names are gone
            else:
                run = await self.sandbox.run(
                    code, profile=profile, tools=tools, inputs=inputs, artifacts=artifacts
                )
        except InputRefused as exc:
            # An input changed on the host since the session checked it (it grew, or went).
            _log.warning("run %s: input refused: %s", self.run_id, exc.message)
            host: InputRefused | ArtifactStoreFailed = exc
            ended = f"did not run: input {exc.name!r} refused ({exc.reason})"
        except ArtifactStoreFailed as exc:
            # Logged where it happened, with the host path; the model learns it is the host's.
            host, ended = exc, "program ran; the artifact store could not take its files"
        finally:
            tools.end()  # (what its withdrawn or failed proposals held, however it ended)
        held = self._hold(tools, notes, held_before)  # what it proposed waits; the model knows
        if run is None:
            result = host_failure(host, notes)
        else:
            _log.info(
                "run %s: program %s in %.1f ms, %d tool calls%s",
                self.run_id,
                run.status,
                (time.perf_counter() - began) * 1000,
                run.tool_calls,
                f", stderr: {run.stderr[-500:]!r}" if run.stderr else "",
            )
            result = program_result(
                run, stdout_bytes=self.budget.stdout_bytes, notes=notes, session_seconds=session_s
            )
            ended = (
                f"program {run.status}, {run.tool_calls} tool calls"
                + (f", limit {run.limit}" if run.limit else "")
                + (f", {len(run.artifacts)} artifacts" if run.artifacts else "")
            )
        note = notes.get("proposals")
        waits = isinstance(note, dict) and note["status"] == "needs_approval"
        if held is not None:
            result = unheld(result, held)
        elif waits and not result.is_error:
            result = result.model_copy(update={"code": "needs_approval"})
        self.audit.program(
            ctx,
            digest,
            code=result.code,
            detail=ended,
            duration_s=time.perf_counter() - began,
            effects=effects,
        )
        stored = run.artifacts if run is not None else ()
        notes_kept = functools.partial(kept_notes, notes, run)  # made only if too large
        return result.model_copy(update={"artifacts": stored}), notes_kept

    def _hold(
        self, tools: ToolSession, notes: dict[str, object], before: set[str]
    ) -> LedgerError | None:
        """Hold what the program proposed as one batch, and say so in ``notes`` (under
        ``proposals``); a change already committed in the run, one the session holds already,
        or one that ended (denied...) while the program ran, is named there, in no new batch.
        The ledger's error when it could not take the batch: its previews are stored all
        the same, and wait as the session's paused writes, each on its own."""
        proposed = tools.proposed_previews()
        if not proposed or self.writes is None or self.batches is None:
            return None
        # What the session held ``before`` the program may have been committed or denied
        # since (its settling runs while the program does): only those are read again.
        now = self.batches.holding()
        earlier = split_proposed(as_now(self.writes.ledger, proposed, before | now), now)
        fresh = earlier.fresh
        if not fresh:
            notes["proposals"] = nothing_new_note(earlier)
            return None
        try:
            batch = self.writes.store_batch(fresh)
        except LedgerError as exc:
            held = self.batches.hold_each(fresh)
            _log.error(
                "run %s: %d proposals stored, but not as a batch (%s): %s (%s)",
                self.run_id,
                len(fresh),
                "each waits as a paused write" if held else "held by no session",
                exc.code,
                exc,
            )
            notes["proposals"] = unheld_note(fresh, exc, held=held, earlier=earlier)
            return exc
        notes["proposals"] = self.batches.hold(batch, fresh, earlier)
        return None

    def _artifact_dir(self, call_id: str) -> Path | None:
        """Where one program's artifacts go (see :func:`artifact_dir`)."""
        if self.artifact_root is None:
            return None
        return artifact_dir(self.artifact_root, call_id)

    def _kept_sandbox(self) -> KeptSandbox:
        if self._closed:
            # A program admitted just before close() would start a container nothing closes.
            raise SandboxClosed("the session was closed before its program started")
        if self._kept is None:
            # Raises UsageError when the backend cannot keep (Harness.session checks first).
            self._kept = self.sandbox.keep(
                self.principal,
                idle_timeout=self.idle_timeout,
                profile=self.profile,
                inputs=self.given,
            )
        return self._kept

    async def close(self) -> None:
        """Release the kept container, if there is one; closed, it starts no other."""
        self._closed = True
        if self._kept is not None:
            await self._kept.close()


def _refuse_files_if_restricted(inputs: Inputs | None, profile: SandboxProfile) -> None:
    if inputs and profile.language_mode == "restricted":
        names = ", ".join(repr(name) for name in sorted(inputs))
        raise UsageError(
            f"inputs ({names}) are files under /data, and a program in the restricted "
            "language mode cannot open files (it has no open() and no pathlib); give inputs "
            "with language_mode='full' (SandboxProfile(language_mode='full'), or "
            'language_mode = "full" in the policy file\'s [sandbox] table; the data image '
            "runs full mode)"
        )
