"""How a run ended, judged on the host: one :class:`RunResult` from what the bridge returned.

The bridge returns the guest's ``done`` frame, the :class:`RunEnd` with which it stopped the
run, or nothing when the runner went away. Whatever the guest reports is validated and
re-checked (output caps, limits); the container's cgroup counters then say which limit, if
any, actually stopped the program, because a limit often surfaces in the guest as an ordinary
exception or as silence. In a kept container they are read since the run's mark
(:func:`~airlock.sandbox._cgroup.mark_run`): what earlier programs hit is not this one's.

A ``done`` frame has passed the bridge's decoder (bytes, elements and nesting within budget,
strict JSON), so its ``value`` is JSON by construction and is not validated again: walking
200,000 elements through a validator would hold the event loop for a tenth of a second. Its
size is checked again (:func:`~airlock.sandbox._final_value.oversized`): the done frame's
budget holds far more than a final value may be.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from typing import Any, Final

from docker.models.containers import Container
from pydantic import BaseModel, ConfigDict, ValidationError

from airlock.bridge import RunEnd
from airlock.bridge import airlock_wire as wire
from airlock.policies import SandboxProfile
from airlock.sandbox._cgroup import CgroupEvidence, RunMark, read_evidence
from airlock.sandbox._final_value import oversized
from airlock.sandbox._hardening import tmpfs_files
from airlock.sandbox._result import (
    LimitName,
    ProgramError,
    RunResult,
    RunStatus,
    SkippedArtifact,
)
from airlock.sandbox._runner_exit import runner_state

__all__ = ["judge_outcome", "limit_message"]

_KILLED_EXIT_STATUS: Final = 137
_MAX_SKIPPED: Final = 20
_MAX_COUNT: Final = 2**31 - 1
_REASON_CHARS: Final = 200
_ARTIFACT_NAME: Final = re.compile(wire.ARTIFACT_NAME)
_UNPRINTABLE: Final = re.compile(r"[^\x20-\x7e]")
_RUNNER_EXIT_S: Final = 2.0
"""How long after its bridge ended a runner that went away may take to be seen exited by the
engine; never past the run's deadline."""
_LAST_LOOK_S: Final = 0.25
"""Looked for at least this long, even when the bridge ended at the deadline."""
_BRIDGE_CLOSED: Final = (
    "the program closed or shut down its end of the bridge before the run reported, and "
    "the runner went on running; a program must leave the bridge's socket alone"
)
_Evidence = Callable[[], CgroupEvidence | None]
"""Reads the run's cgroup evidence now (as late as possible: counters move until the end)."""


def _size(size: int) -> str:
    if size >= 1 << 20:
        return f"{size / (1 << 20):.1f} MiB"
    return f"{size} bytes"


def limit_message(
    limit: LimitName, profile: SandboxProfile, *, peak_memory_bytes: int | None = None
) -> str:
    """One sentence naming the limit a program hit and how much it used (or tried to), for
    the limits the container enforces; the bridge's own (calls, bytes) say theirs."""
    match limit:
        case "timeout":
            return f"the program was still running at its deadline of {profile.timeout_s:g} s"
        case "memory":
            used = (
                f"used {_size(peak_memory_bytes)} of memory"
                if peak_memory_bytes
                else "ran out of memory"
            )
            return f"the program {used}; the limit is {_size(profile.memory_bytes)}"
        case "pids":
            return (
                "the program tried to run more than "
                f"{profile.pids_limit} processes and threads at once; that is the limit"
            )
        case "output":
            return (
                "the program printed more than "
                f"{_size(profile.output_limit_bytes)} to stdout or stderr; the limit is "
                f"{_size(profile.output_limit_bytes)} each"
            )
        case "disk":
            return (
                f"the program filled /tmp; it holds {_size(profile.tmpfs_bytes)} and "
                f"{tmpfs_files(profile.tmpfs_bytes)} files and directories at most"
            )
        case "artifacts":
            return (
                f"the program filled /out; the artifact limit is "
                f"{_size(profile.artifact_limit_bytes)} and {profile.artifact_limit_files} files"
            )
        case "calls" | "in_flight" | "bytes":
            return f"the program hit the bridge's {limit} limit"


class _GuestResult(BaseModel):
    """The ``done`` frame's result as the guest reports it; validated, then re-checked."""

    model_config = ConfigDict(extra="ignore", strict=True)

    status: RunStatus
    exit_status: int
    has_value: bool
    value: Any = None
    """JSON already: see the module's docstring."""
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    limit: LimitName | None = None
    error: ProgramError | None = None
    duration_s: float | None = None
    cpu_time_s: float | None = None
    peak_memory_bytes: int | None = None
    started_at: float | None = None
    artifacts_skipped: Any = None
    """Checked entry by entry (:func:`_skipped`): a malformed one is dropped, not the run."""
    artifacts_skipped_count: Any = 0


async def judge_outcome(
    outcome: dict[str, Any] | RunEnd | None,
    *,
    container: Container,
    began: float,
    profile: SandboxProfile,
    pooled: bool,
    since: RunMark | None = None,
    kept_runner_alive: bool = False,
    host_ended: bool = False,
) -> RunResult:
    """The result of one run of ``container``'s runner, ``began`` on the perf counter clock.

    ``since`` is the mark of a kept container's run; ``kept_runner_alive`` says that a kept
    runner is still connected, so an ``outcome`` of ``None`` means that only the program's
    process went away (it exited, or was killed). ``host_ended`` says that the host ended
    the bridge itself (it is destroying the container): a runner still running then is no
    sign that the program closed the bridge.

    An ``outcome`` of ``None`` otherwise costs at most until the run's deadline (a little
    past it when the bridge ended just before): a runner the engine sees exit died, one that
    is still running at the deadline is a timeout, and one still running well before it is a
    protocol error (the program closed or shut down its end of the bridge).

    Raises:
        SandboxError: the engine failed while the result was being judged.
    """
    evidence = functools.partial(read_evidence, str(container.id), since=since)
    if outcome is None and kept_runner_alive:
        return _program_exited(evidence, began, pooled, profile)
    if outcome is None:
        # Docker's OOMKilled covers the container's life: one of an earlier program's
        # processes killed (in a run that still ended well) is not this run's evidence.
        earlier_oom = since is not None and since.oom_kills > 0
        return await _runner_died(
            container,
            evidence,
            began,
            pooled,
            profile,
            earlier_oom=earlier_oom,
            host_ended=host_ended,
        )
    if isinstance(outcome, RunEnd):
        if outcome.code == "protocol_error":
            return _protocol_error(began, outcome.message, pooled)
        limit = outcome.limit or "timeout"
        message = None if limit == "timeout" else outcome.message
        return _stopped(evidence, began, limit, pooled, profile, message)
    try:
        guest = _GuestResult.model_validate(outcome.get("result"))
    except ValidationError as exc:
        return _protocol_error(began, f"malformed result: {exc.error_count()} errors", pooled)
    refusal = await oversized(guest.value)
    if refusal is not None:
        # What the guest reports for such a value (airlock_output.too_large): a forged done
        # frame gets no more through than an honest one.
        refused = {"status": "error", "exit_status": 1, "has_value": False, "value": None}
        guest = guest.model_copy(update=refused | {"error": refusal})
    return _checked(evidence, guest, began, profile, pooled)


def _checked(
    read: _Evidence, guest: _GuestResult, began: float, profile: SandboxProfile, pooled: bool
) -> RunResult:
    cap = profile.output_limit_bytes
    stdout, cut_out = _cap_text(guest.stdout, cap)
    stderr, cut_err = _cap_text(guest.stderr, cap)
    status, limit, exit_status = guest.status, guest.limit, guest.exit_status
    # A program that finished needs no verdict on limits: its peak is its processes' own.
    evidence = read() if status != "ok" else None
    if status != "ok" and limit is None and evidence is not None:
        # A failure caused by a limit surfaces in the guest as an ordinary exception
        # (fork fails with EAGAIN); the kernel's counters say which limit it was.
        limit = _limit_from(evidence)
        if limit is not None:
            status, exit_status = "limit_exceeded", _KILLED_EXIT_STATUS
    peak = guest.peak_memory_bytes
    if evidence is not None and evidence.peak_memory_bytes is not None:
        peak = max(peak or 0, evidence.peak_memory_bytes)
    error = guest.error
    if (
        status == "limit_exceeded"
        and limit is not None
        and (error is None or error.type != "LimitExceeded")
    ):
        # The guest saw an ordinary exception (MemoryError, ENOSPC): say which limit and how
        # much, keeping where the program was.
        error = ProgramError(
            type="LimitExceeded",
            message=limit_message(limit, profile, peak_memory_bytes=peak),
            line=error.line if error else None,
            traceback=error.traceback if error else None,
        )
    skipped, skipped_count = _skipped(guest.artifacts_skipped, guest.artifacts_skipped_count)
    # Built, not validated again: every field is the validated guest's or the host's own.
    return RunResult.model_construct(
        status=status,
        exit_status=exit_status,
        has_value=guest.has_value,
        stdout=stdout,
        stderr=stderr,
        truncated=guest.truncated or cut_out or cut_err,
        limit=limit,
        error=error,
        duration_s=time.perf_counter() - began,
        program_duration_s=guest.duration_s,
        cpu_time_s=guest.cpu_time_s,
        peak_memory_bytes=peak,
        started_at=guest.started_at,
        pooled=pooled,
        artifacts_skipped=skipped,
        artifacts_skipped_count=skipped_count,
        value=guest.value,  # the decoder's JSON as it is
    )


def _skipped(entries: Any, count: Any) -> tuple[tuple[SkippedArtifact, ...], int]:
    """What the guest says it skipped in /out, taken as far as it follows the guest's own
    rules: a name is an artifact's name (``airlock_wire.ARTIFACT_NAME``: no markup, no
    control character, no path out), a reason is text, cut and escaped to printable ASCII.
    Any other entry is dropped but still counted; a count that is no count is the entries'."""
    listed = entries if isinstance(entries, list) else []
    kept: list[SkippedArtifact] = []
    for entry in listed:
        if len(kept) == _MAX_SKIPPED:
            break
        if not isinstance(entry, dict):
            continue
        name, reason = entry.get("name"), entry.get("reason")
        if isinstance(name, str) and _ARTIFACT_NAME.fullmatch(name) and isinstance(reason, str):
            shown = _UNPRINTABLE.sub(_escape, reason[:_REASON_CHARS])[:_REASON_CHARS]
            kept.append(SkippedArtifact(name=name, reason=shown))
    said = count if type(count) is int and count >= 0 else 0
    return tuple(kept), min(max(said, len(listed)), _MAX_COUNT)


def _escape(found: re.Match[str]) -> str:
    return found.group().encode("unicode_escape").decode("ascii")


def _stopped(
    read: _Evidence,
    began: float,
    limit: LimitName,
    pooled: bool,
    profile: SandboxProfile,
    message: str | None = None,
) -> RunResult:
    evidence = read()
    if limit == "timeout" and evidence is not None:
        # A fork bomb keeps the runner busy until the deadline: the pids counter tells
        # what actually stopped the program.
        found = _limit_from(evidence)
        if found is not None:
            limit, message = found, None
    peak = evidence.peak_memory_bytes if evidence else None
    return RunResult(
        status="limit_exceeded",
        exit_status=_KILLED_EXIT_STATUS,
        has_value=False,
        limit=limit,
        error=ProgramError(
            type="LimitExceeded",
            message=message or limit_message(limit, profile, peak_memory_bytes=peak),
        ),
        duration_s=time.perf_counter() - began,
        peak_memory_bytes=peak,
        pooled=pooled,
    )


def _program_exited(
    read: _Evidence, began: float, pooled: bool, profile: SandboxProfile
) -> RunResult:
    evidence = read()
    limit = _limit_from(evidence) if evidence else None
    if limit is not None:
        # The OOM killer chose the program's process, not the runner: still a limit hit (and
        # the kept container goes, as after any limit).
        return _stopped(read, began, limit, pooled, profile)
    return RunResult(
        status="error",
        exit_status=1,
        has_value=False,
        error=ProgramError(
            type="ProgramExited",
            message="the program's process ended before it reported (it exited or was "
            "killed, or it closed its end of the bridge and was ended); its top-level names "
            "are not kept",
        ),
        duration_s=time.perf_counter() - began,
        pooled=pooled,
    )


async def _runner_died(
    container: Container,
    read: _Evidence,
    began: float,
    pooled: bool,
    profile: SandboxProfile,
    *,
    earlier_oom: bool,
    host_ended: bool,
) -> RunResult:
    evidence = read()
    limit = _limit_from(evidence) if evidence else None
    if limit is not None:
        return _stopped(read, began, limit, pooled, profile)
    # The program may have shut its end of the bridge down and gone on: the engine tells,
    # asked no longer than the run's deadline allows.
    now, deadline = time.perf_counter(), began + profile.timeout_s
    until = max(min(now + _RUNNER_EXIT_S, deadline), now + _LAST_LOOK_S)
    state = await runner_state(container, until=until)
    if state == "oom_killed" and not earlier_oom:
        return _stopped(read, began, "memory", pooled, profile)
    if state == "running" and not host_ended:
        if time.perf_counter() >= deadline:
            return _stopped(read, began, "timeout", pooled, profile)
        return _protocol_error(began, _BRIDGE_CLOSED, pooled)
    return RunResult(
        status="error",
        exit_status=_KILLED_EXIT_STATUS,
        has_value=False,
        error=ProgramError(type="RunnerDied", message="the sandbox runner exited before reporting"),
        duration_s=time.perf_counter() - began,
        pooled=pooled,
    )


def _protocol_error(began: float, detail: str, pooled: bool) -> RunResult:
    return RunResult(
        status="protocol_error",
        exit_status=_KILLED_EXIT_STATUS,
        has_value=False,
        error=ProgramError(type="ProtocolError", message=detail),
        duration_s=time.perf_counter() - began,
        pooled=pooled,
    )


def _limit_from(evidence: CgroupEvidence) -> LimitName | None:
    if evidence.oom_killed:
        return "memory"
    if evidence.pids_limit_hit:
        return "pids"
    return None


def _cap_text(text: str, cap: int) -> tuple[str, bool]:
    data = text.encode("utf-8", errors="replace")
    if len(data) <= cap:
        return text, False
    return data[:cap].decode("utf-8", errors="ignore"), True
