"""The one seam between airlock and whatever runs programs."""

from __future__ import annotations

from typing import Protocol

from airlock.bridge import ToolSession
from airlock.policies import SandboxProfile
from airlock.sandbox._result import RunResult

__all__ = ["SandboxBackend"]


class SandboxBackend(Protocol):
    """Runs one program per call in a fresh, isolated environment."""

    async def run(
        self,
        program: str,
        *,
        profile: SandboxProfile | None = None,
        tools: ToolSession | None = None,
    ) -> RunResult:
        """Run ``program`` under ``profile`` (the backend's default when ``None``).

        ``tools`` is the run's tool session: the authority its ``tools.NAME(...)`` calls are
        admitted with. Without one the program has no tools.

        A program that fails or hits a limit returns a result; it does not raise.

        Raises:
            SandboxError: when the backend itself cannot run programs.
        """
        ...

    async def close(self) -> None:
        """Release every resource; no container or process of this backend remains."""
        ...
