"""A container's bridge socket path that cannot be bound fails at once, and for good.

A Unix socket's path holds at most 107 bytes on Linux; a deep temporary directory (``TMPDIR``)
makes every socket path too long, and no retry can help. No Docker: the client given to
:func:`launch` refuses every use, so a start that gets past the socket reaches "no engine".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

import docker
import docker.errors
import pytest

from airlock.policies import SandboxProfile
from airlock.sandbox import EngineUnavailable, SandboxError
from airlock.sandbox._errors import SocketPathTooLong
from airlock.sandbox._launch import launch

SOCKET_PATH_LIMIT = 107
"""Linux's: ``sun_path`` holds 108 bytes, the terminating zero included."""
# The socket's path is the root, "/run-XXXXXXXX" and "/bridge.sock".
_UNDER_ROOT = len("/run-12345678/bridge.sock")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _NoEngine:
    """A Docker client with no engine behind it: any use fails as docker-py would."""

    def __getattr__(self, name: str) -> object:
        raise docker.errors.DockerException(f"no engine in this test ({name})")


def _root(tmp_path: Path, socket_path_bytes: int) -> Path:
    """A socket root under which a container's socket path has ``socket_path_bytes``."""
    pad = socket_path_bytes - _UNDER_ROOT - len(os.fsencode(tmp_path)) - 1
    assert pad > 0, "the test's temporary directory is too deep for this case"
    root = tmp_path / ("d" * pad)
    root.mkdir()
    return root


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("socket_path_bytes", "expected"),
    [
        (SOCKET_PATH_LIMIT - 1, EngineUnavailable),
        (SOCKET_PATH_LIMIT, EngineUnavailable),
        (SOCKET_PATH_LIMIT + 1, SocketPathTooLong),
        (SOCKET_PATH_LIMIT + 60, SocketPathTooLong),
    ],
)
async def test_a_socket_path_over_the_limit_fails_for_good(
    tmp_path: Path, socket_path_bytes: int, expected: type[SandboxError]
) -> None:
    root = _root(tmp_path, socket_path_bytes)
    with pytest.raises(SandboxError) as raised:
        await launch(
            cast(docker.DockerClient, _NoEngine()),
            image="airlock-sandbox:latest",
            profile=SandboxProfile(),
            labels={},
            socket_root=root,
        )
    assert type(raised.value) is expected
    assert list(root.iterdir()) == [], "the socket's directory is removed"
    if isinstance(raised.value, SocketPathTooLong):
        error = raised.value
        assert (error.code, error.retryable) == ("sandbox_socket_path_too_long", False)
        assert error.limit == SOCKET_PATH_LIMIT
        assert len(os.fsencode(error.path)) == socket_path_bytes
        assert error.path.startswith(str(root))
        assert error.path in str(error)
        assert "TMPDIR" in str(error)
