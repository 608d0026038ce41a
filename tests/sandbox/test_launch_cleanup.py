"""A start whose socket directory cannot be made fails with a typed, retryable error.

The backend's socket root may be gone (a close() deleted it while the start waited for the
engine) or unwritable: that is the start failing, a :class:`SandboxFailure`, never a raw
``OSError`` escaping the sandbox's error tree. No Docker: the start fails before the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import cast

import docker
import pytest

from airlock.policies import SandboxProfile
from airlock.sandbox import SandboxError, SandboxFailure
from airlock.sandbox._launch import launch


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _deleted(tmp_path: Path) -> Path:
    return tmp_path / "deleted"


def _a_file(tmp_path: Path) -> Path:
    root = tmp_path / "file"
    root.write_text("not a directory")
    return root


@pytest.mark.anyio
@pytest.mark.parametrize("make_root", [_deleted, _a_file], ids=["deleted", "a-file"])
async def test_a_socket_root_that_cannot_hold_a_directory_is_a_sandbox_failure(
    tmp_path: Path, make_root: Callable[[Path], Path]
) -> None:
    root = make_root(tmp_path)
    with pytest.raises(SandboxFailure) as raised:
        await launch(
            cast(docker.DockerClient, object()),
            image="unused",
            profile=SandboxProfile(),
            labels={},
            socket_root=root,
        )
    error: SandboxError = raised.value
    assert (error.code, error.retryable) == ("sandbox_failure", True)
    assert list(tmp_path.iterdir()) == ([root] if root.exists() else [])
