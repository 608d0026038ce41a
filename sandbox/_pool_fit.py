"""Which runs a warm container serves: the rule by which the Docker backend hands one out.

A pooled container is started before any run, with the backend's own inputs mounted
(``airlock serve --inputs DIR``). A run takes one only when its container settings are the
pool's and it asks for exactly those inputs, by name and path; and only while they are still
the files at those paths. A mount holds the inode that was at its path when the container
started, so one started before an input was replaced on the host (``os.replace``, an
editor's save, a directory renamed away and a new one put in its place) would show the old
one: it is removed instead, the run starts its own container (a cold start), and the pool
refills with containers that mount what is there now.
"""

from __future__ import annotations

from collections.abc import Callable

from airlock.policies import SandboxProfile
from airlock.sandbox._container import SandboxContainer
from airlock.sandbox._hardening import container_settings, mounted, same_files
from airlock.sandbox._inputs import RunInput
from airlock.sandbox._pool import WarmPool

__all__ = ["PoolFit"]


class PoolFit:
    """The runs ``pool`` serves: of ``profile``'s container settings, with ``inputs`` (the
    backend's own, as checked). ``discard`` removes a container no run may take."""

    def __init__(
        self,
        pool: WarmPool,
        *,
        profile: SandboxProfile,
        inputs: tuple[RunInput, ...],
        discard: Callable[[SandboxContainer], None],
    ) -> None:
        self._pool = pool
        self._settings = container_settings(profile)
        self._mounted = mounted(inputs)
        self._discard = discard

    def fits(self, profile: SandboxProfile, inputs: tuple[RunInput, ...]) -> bool:
        """Whether a pooled container can serve a run of ``profile`` with ``inputs``: the
        same container settings, and exactly the pool's inputs by name and path."""
        return container_settings(profile) == self._settings and mounted(inputs) == self._mounted

    def take(
        self, profile: SandboxProfile, inputs: tuple[RunInput, ...]
    ) -> SandboxContainer | None:
        """A warm container for the run, or ``None``: it does not fit, none is ready, or the
        one taken mounts files replaced on the host since it started (it is discarded).
        ``inputs`` are the run's, checked just now: their identity is what is there now."""
        container = self._pool.take() if self.fits(profile, inputs) else None
        if container is None or same_files(container.inputs, inputs):
            return container
        self._discard(container)
        return None
