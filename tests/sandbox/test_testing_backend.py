from __future__ import annotations

import pytest

from airlock.policies import SandboxProfile
from airlock.sandbox import SandboxBackend
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
