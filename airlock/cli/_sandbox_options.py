"""What ``serve`` and ``chat`` take on the command line about the session's programs.

The policy file's ``[sandbox]`` table is the profile they run programs under: the one
``airlock inventory`` reports and its lock holds. ``--timeout``, ``--memory`` and ``--image``
may narrow it for one server (a shorter deadline, less memory, the base image instead of the
data image); one that would widen it is a usage error naming the flag and the setting to
change in the policy file, so what runs is never more than what was reviewed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final

import typer

from airlock.cli._run import RestrictedDataImage, profile_options
from airlock.policies import SandboxProfile, UsageError

__all__ = [
    "ImageOption",
    "InputsOption",
    "KeepStateOption",
    "MemoryOption",
    "SandboxOptions",
    "TimeoutOption",
]

TimeoutOption = Annotated[
    float | None,
    typer.Option(
        help="Wall-clock deadline of each program, in seconds: the policy's or shorter "
        "(default: the policy's)."
    ),
]
MemoryOption = Annotated[
    str | None,
    typer.Option(
        help="Memory of each program, e.g. 1g: the policy's or less (default: the policy's)."
    ),
]
ImageOption = Annotated[
    str | None,
    typer.Option(
        help="base, or data: numpy, pandas, pyarrow, matplotlib; data only where the policy "
        "runs it (default: the policy's)."
    ),
]
KeepStateOption = Annotated[
    bool,
    typer.Option(
        "--keep-state", help="Run the session's programs in one kept container (state stays)."
    ),
]
InputsOption = Annotated[
    Path | None,
    typer.Option(
        help="A directory whose entries every program reads at /data/NAME (read-only).",
        exists=True,
        file_okay=False,
    ),
]

# Settings a flag may lower; any other the flags change (the data image's full mode and its
# memory) is a widening, so it fails closed.
_LOWER_IS_NARROWER: Final = ("timeout_s", "memory_bytes")


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxOptions:
    """What ``serve`` and ``chat`` take on the command line about the session's programs."""

    timeout: float | None = None
    memory: str | None = None
    image: str | None = None
    keep_state: bool = False
    inputs: Path | None = None
    """A directory the operator allows: each entry not starting with a dot is an input."""

    def profile(self, base: SandboxProfile) -> SandboxProfile:
        """``base`` (the policy file's profile) with these options."""
        return profile_options(base, image=self.image, timeout=self.timeout, memory=self.memory)

    def checked_profile(self, base: SandboxProfile, *, policy: Path) -> SandboxProfile:
        """``base`` (the profile of the policy file ``policy``) with these options, which may
        only narrow it.

        Raises:
            UsageError: an option widens ``base`` (a longer deadline, more memory, the data
                image where the policy runs the base one).
            typer.BadParameter: an option's value is not one the profile takes.
        """
        try:
            chosen = self.profile(base)
        except RestrictedDataImage:
            # --image data where the policy runs restricted programs on the base image:
            # that widens its image (serve and chat have no --mode to mend).
            raise self._widens("image", base, policy) from None
        for name in SandboxProfile.model_fields:
            was, now = getattr(base, name), getattr(chosen, name)
            if was == now or (name in _LOWER_IS_NARROWER and now < was):
                continue
            if name == "image" and now == "base":
                continue  # the standard library only: less native code than the data image
            raise self._widens(name, base, policy)
        return chosen

    def _widens(self, name: str, base: SandboxProfile, policy: Path) -> UsageError:
        """The error of a flag that widens the setting ``name`` of ``base``."""
        flag, given, setting = self._cause(name)
        return UsageError(
            f"{flag} {given} widens the policy's sandbox ({setting} in {policy} is "
            f"{getattr(base, setting)}): serve and chat run programs under the profile "
            "`airlock inventory` reports and locks, so a flag may only narrow it; set "
            f"{setting} in the [sandbox] table of {policy} instead (then refresh the lock)"
        )

    def _cause(self, name: str) -> tuple[str, str, str]:
        """The flag that changed the setting ``name``, its value, and the setting to name."""
        if name == "timeout_s" and self.timeout is not None:
            return "--timeout", f"{self.timeout:g}", "timeout_s"
        if name == "memory_bytes" and self.memory is not None:
            return "--memory", self.memory, "memory_bytes"
        # Only the image brings other settings with it (full mode, 1 GiB).
        return "--image", str(self.image), "image"

    def input_files(self) -> dict[str, Path]:
        """The inputs: the entries of :attr:`inputs` by name (hidden ones left out)."""
        if self.inputs is None:
            return {}
        return {
            entry.name: entry
            for entry in sorted(self.inputs.iterdir())
            if not entry.name.startswith(".")
        }
