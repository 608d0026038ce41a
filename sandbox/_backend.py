"""The one seam between airlock and whatever runs programs."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from airlock.bridge import ToolSession
from airlock.policies import Principal, SandboxProfile
from airlock.sandbox._kept import KeptSandbox
from airlock.sandbox._result import RunResult

__all__ = ["SandboxBackend"]


class SandboxBackend(Protocol):
    """Runs one program per call in a fresh, isolated environment, and (when it can) keeps
    one environment for the programs of one conversation.

    :class:`~airlock.sandbox.DockerBackend` is the real one; ``ScriptedBackend`` in
    :mod:`airlock.sandbox.testing` is the fake for tests of the layers above.
    """

    @property
    def profile(self) -> SandboxProfile:
        """The profile programs run under when a call gives none."""
        ...

    @property
    def can_keep(self) -> bool:
        """Whether :meth:`keep` works with this backend."""
        ...

    async def run(
        self,
        program: str,
        *,
        profile: SandboxProfile | None = None,
        tools: ToolSession | None = None,
        inputs: Mapping[str, str | os.PathLike[str]] | None = None,
        artifacts: Path | None = None,
    ) -> RunResult:
        """Run ``program`` under ``profile`` (the backend's default when ``None``).

        ``tools`` is the run's tool session: the authority its ``tools.NAME(...)`` calls are
        admitted with. Without one the program has no tools. ``inputs`` (name -> host path)
        are mounted read-only at ``/data/NAME``; the caller has decided that the run may read
        them. ``artifacts`` is a directory (not existing yet) for the files the program
        leaves in ``/out``; without it they are dropped.

        A program that fails or hits a limit returns a result; it does not raise.

        Raises:
            InputRefused: an input cannot be mounted or the inputs are over the limit.
            SandboxError: when the backend itself cannot run programs.
        """
        ...

    def keep(
        self,
        owner: Principal,
        *,
        idle_timeout: float = 300.0,
        profile: SandboxProfile | None = None,
        inputs: Mapping[str, str | os.PathLike[str]] | None = None,
    ) -> KeptSandbox:
        """A kept sandbox for one conversation of ``owner``: its programs run one after
        another in one environment and see what earlier ones left (:class:`KeptSandbox`),
        with ``inputs`` mounted for the whole conversation.

        Raises:
            UsageError: the backend cannot keep an environment (:attr:`can_keep` is false),
                or an input cannot be mounted (``InputRefused``).
        """
        ...

    async def close(self) -> None:
        """Release every resource; no container or process of this backend remains."""
        ...
