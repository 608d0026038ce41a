"""The kernel's per-user budgets are each container's own: a program that spends its user's
pipe budget leaves a program in another container with full-size pipes.

Without a user namespace, what the kernel counts per uid (pipe buffers against
``fs.pipe-user-pages-soft``, pending signals, ...) is shared by every process of that uid on
the host. Each container runs as a uid of its own (the profile's default ``user``), so one
program can spend only its own. Program A enlarges pipes until the kernel refuses
(``EPERM``), then makes pipes until its new ones have shrunk, and holds them through a tool call
the host answers only once program B, in another container, has measured its pipes. Judged
from the host. (Under gVisor pipes are its own kernel's, counted against no host budget.)
"""

from __future__ import annotations

import asyncio
import pwd
import textwrap
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from airlock.bridge import ToolSession
from airlock.policies import ContainerRuntime, Grant, Principal, SandboxProfile, read
from airlock.sandbox import DockerBackend, RunResult
from airlock.tools import Registry
from tests.conftest import IMAGE
from tests.sandbox.runtimes import require_runtime

pytestmark = pytest.mark.docker

F_SETPIPE_SZ = 1031
F_GETPIPE_SZ = 1032
DEFAULT_PIPE = 65536
SPENDER = f"""
import fcntl, os
pipes, enlarged = [], 0
while True:  # until the kernel says this user's budget is spent
    r, w = os.pipe()
    pipes.append((r, w))
    try:
        fcntl.fcntl(w, {F_SETPIPE_SZ}, 1 << 20)
    except PermissionError:
        break
    enlarged += 1
mine = {DEFAULT_PIPE}
while mine == {DEFAULT_PIPE} and len(pipes) < 100:  # and new pipes get the least room
    r, w = os.pipe()
    pipes.append((r, w))
    mine = fcntl.fcntl(w, {F_GETPIPE_SZ})
tools.test_barrier_pass(step="held")  # answered once the other program has measured
{{"uid": os.getuid(), "enlarged": enlarged, "new_pipe": mine}}
"""
MEASURER = f"""
import fcntl, os
r, w = os.pipe()
size = fcntl.fcntl(w, {F_GETPIPE_SZ})
try:
    enlarged = fcntl.fcntl(w, {F_SETPIPE_SZ}, 1 << 20)
except PermissionError:
    enlarged = "EPERM"
{{"uid": os.getuid(), "new_pipe": size, "enlarged": enlarged}}
"""
Step = Annotated[Literal["held"], Field()]


class Passed(BaseModel):
    step: str


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["runc", "crun"])
def runtime(request: pytest.FixtureRequest) -> ContainerRuntime:
    require_runtime(request.param)
    runtime: ContainerRuntime = request.param
    return runtime


def _barrier(reached: asyncio.Event, released: asyncio.Event) -> Registry:
    registry = Registry()

    @registry.tool(effects=[read("barrier:step/{step}")], scope="barrier.pass",
                   callers={"direct", "code"})  # fmt: skip
    async def test_barrier_pass(step: Step) -> Passed:
        """Tell the host a step is reached and wait for its go. Use it to order programs.
        It does nothing else."""
        reached.set()
        await released.wait()
        return Passed(step=step)

    return registry


@pytest.mark.anyio
async def test_a_program_that_spends_its_pipe_budget_leaves_others_theirs(
    runtime: ContainerRuntime,
) -> None:
    reached, released = asyncio.Event(), asyncio.Event()
    registry = _barrier(reached, released)
    grant = Grant(scopes=frozenset({"barrier.pass"}), effects=(read("barrier:**"),))
    profile = SandboxProfile(language_mode="full", timeout_s=60, runtime=runtime)
    backend = DockerBackend(image=IMAGE, profile=profile, pool_size=0)
    await backend.start()
    try:
        spender = ToolSession(
            registry=registry,
            principal=Principal(
                user_id="spender", tenant_id="acme", scopes=frozenset({"barrier.pass"})
            ),
            grant=grant,
        )
        spending = asyncio.ensure_future(backend.run(textwrap.dedent(SPENDER), tools=spender))
        waiting = asyncio.ensure_future(reached.wait())
        await asyncio.wait([waiting, spending], timeout=60, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        assert reached.is_set(), spending.result().error if spending.done() else "no call in 60 s"
        try:
            measured: RunResult = await backend.run(textwrap.dedent(MEASURER))
        finally:
            released.set()
        spent = await spending
    finally:
        await backend.close()

    assert spent.ok, spent.error
    assert measured.ok, measured.error
    assert isinstance(spent.value, dict)
    assert isinstance(measured.value, dict)
    # The attack worked where it was made: its user's new pipes are smaller than the default.
    assert spent.value["enlarged"] > 0, spent.value
    assert spent.value["new_pipe"] < DEFAULT_PIPE, spent.value
    # ... and nowhere else.
    assert measured.value["new_pipe"] == DEFAULT_PIPE, measured.value
    assert measured.value["enlarged"] == 1 << 20, measured.value
    uids = {spent.value["uid"], measured.value["uid"]}
    assert len(uids) == 2, uids
    assert not uids & {0, 65534}, uids
    for uid in uids:  # a uid no user of the host has
        with pytest.raises(KeyError):
            pwd.getpwuid(uid)
