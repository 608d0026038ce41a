"""A fake sandbox backend for tests of the layers above (no Docker).

It never runs the program: it answers with results a test scripts in advance, and records
every program and profile it was asked to run. Integration tests of the real boundary use
:class:`airlock.sandbox.DockerBackend`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from airlock.bridge import ToolSession
from airlock.policies import Principal, SandboxProfile, UsageError
from airlock.sandbox._inputs import RunInput, resolve_inputs
from airlock.sandbox._kept import KeptSandbox
from airlock.sandbox._result import RunResult

__all__ = ["ScriptedBackend", "ok_result"]


def ok_result(value: object = None, *, stdout: str = "") -> RunResult:
    """A successful result with ``value`` as the program's final value."""
    return RunResult.model_validate(
        {
            "status": "ok",
            "exit_status": 0,
            "has_value": value is not None,
            "value": value,
            "stdout": stdout,
            "duration_s": 0.0,
        }
    )


class ScriptedBackend:
    """A :class:`airlock.sandbox.SandboxBackend` whose results are scripted.

    ``script`` is either results returned in order, or a function of (program, profile).
    Inputs are checked as the Docker backend checks them (the same refusals), and recorded.
    """

    def __init__(
        self,
        script: Iterable[RunResult] | Callable[[str, SandboxProfile], RunResult],
        *,
        profile: SandboxProfile | None = None,
    ) -> None:
        self.profile = profile or SandboxProfile()
        self._respond = script if callable(script) else None
        self._queue = [] if callable(script) else list(script)
        self.calls: list[tuple[str, SandboxProfile]] = []
        self.sessions: list[ToolSession | None] = []
        self.inputs: list[tuple[RunInput, ...]] = []
        """The checked inputs of each run, in order."""
        self.artifact_dirs: list[Path | None] = []
        self.closed = False

    async def run(
        self,
        program: str,
        *,
        profile: SandboxProfile | None = None,
        tools: ToolSession | None = None,
        inputs: Mapping[str, str | os.PathLike[str]] | None = None,
        artifacts: Path | None = None,
    ) -> RunResult:
        """Record the call and return the next scripted result.

        Raises:
            InputRefused: an input is refused, as by the Docker backend.
            AssertionError: when the script has run out.
        """
        chosen = profile or self.profile
        checked = resolve_inputs(inputs, limit_bytes=chosen.input_limit_bytes)
        self.calls.append((program, chosen))
        self.sessions.append(tools)
        self.inputs.append(checked)
        self.artifact_dirs.append(artifacts)
        if self._respond is not None:
            return self._respond(program, chosen)
        assert self._queue, "ScriptedBackend ran out of scripted results"
        return self._queue.pop(0)

    @property
    def can_keep(self) -> bool:
        """Never: scripted results have no state to keep between programs."""
        return False

    def keep(
        self,
        owner: Principal,
        *,
        idle_timeout: float = 300.0,
        profile: SandboxProfile | None = None,
        inputs: Mapping[str, str | os.PathLike[str]] | None = None,
    ) -> KeptSandbox:
        """Refuse: a scripted backend cannot keep a container.

        Raises:
            UsageError: always; kept sandboxes need :class:`airlock.sandbox.DockerBackend`.
        """
        raise UsageError(
            f"ScriptedBackend cannot keep a container for {owner.user_id!r}; "
            "kept sandboxes (keep_state sessions) need DockerBackend"
        )

    async def close(self) -> None:
        """Mark the backend closed."""
        self.closed = True
