"""How a run ended, judged on the host: one :class:`RunResult` from what the bridge returned.

The bridge returns the guest's ``done`` frame, the :class:`RunEnd` with which it stopped the
run, or nothing when the runner went away. Whatever the guest reports is validated and
re-checked (output caps, limits); the container's cgroup counters then say which limit, if
any, actually stopped the program, because a limit often surfaces in the guest as an ordinary
exception or as silence.

A ``done`` frame has passed the bridge's decoder (bytes, elements and nesting within budget,
strict JSON), so its ``value`` is JSON by construction and is not validated again: walking
200,000 elements through a validator would hold the event loop for a tenth of a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Final

from docker.models.containers import Container
from pydantic import BaseModel, ConfigDict, ValidationError

from airlock.bridge import RunEnd
from airlock.policies import SandboxProfile
from airlock.sandbox._cgroup import CgroupEvidence, read_evidence
from airlock.sandbox._errors import SandboxError, map_docker_errors
from airlock.sandbox._result import LimitName, ProgramError, RunResult, RunStatus

__all__ = ["judge_outcome"]

_KILLED_EXIT_STATUS: Final = 137


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


async def judge_outcome(
    outcome: dict[str, Any] | RunEnd | None,
    *,
    container: Container,
    began: float,
    profile: SandboxProfile,
    pooled: bool,
) -> RunResult:
    """The result of one run of ``container``'s runner, ``began`` on the perf counter clock.

    Raises:
        SandboxError: the engine failed while the result was being judged.
    """
    if outcome is None:
        return await _runner_died(container, began, pooled)
    if isinstance(outcome, RunEnd):
        if outcome.code == "protocol_error":
            return _protocol_error(began, outcome.message, pooled)
        return _stopped(
            str(container.id), began, outcome.limit or "timeout", pooled, outcome.message
        )
    try:
        guest = _GuestResult.model_validate(outcome.get("result"))
    except ValidationError as exc:
        return _protocol_error(began, f"malformed result: {exc.error_count()} errors", pooled)
    return _checked(str(container.id), guest, began, profile, pooled)


def _checked(
    container_id: str, guest: _GuestResult, began: float, profile: SandboxProfile, pooled: bool
) -> RunResult:
    cap = profile.output_limit_bytes
    stdout, cut_out = _cap_text(guest.stdout, cap)
    stderr, cut_err = _cap_text(guest.stderr, cap)
    status, limit, exit_status = guest.status, guest.limit, guest.exit_status
    evidence = read_evidence(container_id)
    if status != "ok" and limit is None and evidence is not None:
        # A failure caused by a limit surfaces in the guest as an ordinary exception
        # (fork fails with EAGAIN); the kernel's counters say which limit it was.
        limit = _limit_from(evidence)
        if limit is not None:
            status, exit_status = "limit_exceeded", _KILLED_EXIT_STATUS
    peak = guest.peak_memory_bytes
    if evidence is not None and evidence.peak_memory_bytes is not None:
        peak = max(peak or 0, evidence.peak_memory_bytes)
    result = RunResult(
        status=status,
        exit_status=exit_status,
        has_value=guest.has_value,
        stdout=stdout,
        stderr=stderr,
        truncated=guest.truncated or cut_out or cut_err,
        limit=limit,
        error=guest.error,
        duration_s=time.perf_counter() - began,
        program_duration_s=guest.duration_s,
        cpu_time_s=guest.cpu_time_s,
        peak_memory_bytes=peak,
        started_at=guest.started_at,
        pooled=pooled,
    )
    # model_copy does not validate: the value is the decoder's JSON as it is.
    return result.model_copy(update={"value": guest.value}) if guest.value is not None else result


def _stopped(
    container_id: str, began: float, limit: LimitName, pooled: bool, message: str | None = None
) -> RunResult:
    evidence = read_evidence(container_id)
    if limit == "timeout" and evidence is not None:
        # A fork bomb keeps the runner busy until the deadline: the pids counter tells
        # what actually stopped the program.
        limit = _limit_from(evidence) or limit
    return RunResult(
        status="limit_exceeded",
        exit_status=_KILLED_EXIT_STATUS,
        has_value=False,
        limit=limit,
        error=ProgramError(type="LimitExceeded", message=message) if message else None,
        duration_s=time.perf_counter() - began,
        peak_memory_bytes=evidence.peak_memory_bytes if evidence else None,
        pooled=pooled,
    )


async def _runner_died(container: Container, began: float, pooled: bool) -> RunResult:
    evidence = read_evidence(str(container.id))
    limit = _limit_from(evidence) if evidence else None
    if limit is None:
        # Gone already (destroyed while the run was in flight) or still exiting: no verdict.
        with contextlib.suppress(SandboxError), map_docker_errors():
            await asyncio.to_thread(container.wait, timeout=5)
            await asyncio.to_thread(container.reload)
            if container.attrs["State"].get("OOMKilled"):
                limit = "memory"
    if limit is not None:
        return _stopped(str(container.id), began, limit, pooled)
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
