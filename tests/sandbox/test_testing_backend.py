from __future__ import annotations

import pathlib
import tempfile

import pytest

from airlock.policies import Principal, SandboxProfile, UsageError
from airlock.sandbox import DockerBackend, KeptSandbox, SandboxBackend
from airlock.sandbox.testing import ScriptedBackend, ok_result


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_scripted_results_in_order_and_calls_recorded() -> None:
    backend = ScriptedBackend([ok_result(1), ok_result(2)])
    checked: SandboxBackend = backend
    assert (await checked.run("a")).value == 1
    full = SandboxProfile(language_mode="full")
    assert (await checked.run("b", profile=full)).value == 2
    assert [program for program, _ in backend.calls] == ["a", "b"]
    assert backend.calls[1][1] is full
    with pytest.raises(AssertionError, match="ran out"):
        await backend.run("c")
    await backend.close()
    assert backend.closed


@pytest.mark.anyio
async def test_scripted_function() -> None:
    backend = ScriptedBackend(lambda program, profile: ok_result(len(program)))
    assert (await backend.run("abcd")).value == 4


def test_the_scripted_backend_declares_what_the_harness_uses() -> None:
    full = SandboxProfile(language_mode="full")
    backend = ScriptedBackend([], profile=full)
    checked: SandboxBackend = backend
    assert checked.profile is full
    assert ScriptedBackend([]).profile == SandboxProfile()
    assert checked.can_keep is False
    owner = Principal(user_id="alice", tenant_id="acme")
    with pytest.raises(UsageError, match="ScriptedBackend cannot keep a container for 'alice'"):
        checked.keep(owner, idle_timeout=5.0)


@pytest.mark.anyio
async def test_the_docker_backend_can_keep() -> None:
    backend = DockerBackend()  # no engine is asked before the first program
    checked: SandboxBackend = backend
    try:
        assert checked.can_keep is True
        assert checked.profile == SandboxProfile()
        kept = checked.keep(Principal(user_id="alice", tenant_id="acme"), idle_timeout=5.0)
        assert isinstance(kept, KeptSandbox)
        assert not kept.alive
    finally:
        await backend.close()


@pytest.mark.anyio
async def test_a_docker_backend_never_started_leaves_no_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    closed = DockerBackend()
    await closed.close()
    DockerBackend()  # dropped unclosed
    assert list(tmp_path.iterdir()) == []
