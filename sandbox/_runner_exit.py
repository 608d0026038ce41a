"""Whether a container's runner has exited, as the engine sees it, asked by a deadline.

A bridge that ends without a ``done`` frame does not say that the runner died: the program
holds the socket's descriptor and may shut it down, or close it, and go on. The engine sees
the runner exit a moment after its socket closed, so the question is asked again until the
answer is "exited" or the time given is up. Each question is one short ``inspect`` off the
event loop: no thread of the loop's default executor (which frame decoding, artifacts and
launches share) is held for longer than that.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final, Literal

from docker.models.containers import Container

from airlock.sandbox._engine_thread import on_engine_thread
from airlock.sandbox._errors import SandboxError, SandboxFailure, map_docker_errors

__all__ = ["RunnerState", "runner_state"]

RunnerState = Literal["exited", "oom_killed", "running"]
"""``exited``: the runner is gone (or so is its container, or the engine cannot say: no
verdict either way); ``oom_killed``: the engine says the OOM killer ended it; ``running``:
still running when the time was up."""

_POLL_S: Final = 0.05
"""Between two questions to the engine."""
_ANSWER_S: Final = 0.5
"""How long one question may take once the time given is up, before the runner is taken to
be running still (a loaded engine answers late)."""


async def runner_state(container: Container, *, until: float) -> RunnerState:
    """Whether ``container``'s runner exited, asked until it did or ``until`` (on the perf
    counter clock) passed; returns by ``until`` plus :data:`_ANSWER_S` at the latest."""
    while True:
        left = until - time.perf_counter()
        try:
            async with asyncio.timeout(max(left, _ANSWER_S)):
                state = await on_engine_thread(_state, container)
        except TimeoutError:
            return "running"
        except SandboxError:
            # Removed already (destroyed while the run was in flight), or no engine to ask.
            return "exited"
        if not state.get("Running"):
            return "oom_killed" if state.get("OOMKilled") else "exited"
        left = until - time.perf_counter()
        if left <= 0:
            return "running"
        await asyncio.sleep(min(_POLL_S, left))


def _state(container: Container) -> dict[str, Any]:
    client = container.client
    if client is None:  # not from an engine: nobody to ask
        raise SandboxFailure("the container has no engine client")
    # The low-level call leaves the shared Container's attrs alone.
    with map_docker_errors():
        attrs = client.api.inspect_container(str(container.id))
    state = attrs.get("State") if isinstance(attrs, dict) else None
    return state if isinstance(state, dict) else {}
